// Part of the wire contract of rbln.artifact.v1.ArtifactService (see the
// comment at the top of artifact_service.proto): the trailing metadata entry
// that every error status of the daemon's handlers carries, so that a client
// can tell a status the daemon returned from a transport failure. An OK
// status is always the handler's and carries no mark.
#ifndef RBLN_ARTIFACT_V1_REPLY_METADATA_H_
#define RBLN_ARTIFACT_V1_REPLY_METADATA_H_

namespace rbln::artifact::v1 {

inline constexpr char kReplyMetadataKey[] = "rbln-artifactd-reply";
inline constexpr char kReplyMetadataValue[] = "1";

}  // namespace rbln::artifact::v1

#endif  // RBLN_ARTIFACT_V1_REPLY_METADATA_H_
