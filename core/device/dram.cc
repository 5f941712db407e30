#include "core/device/dram.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/budget.h"
#include "core/status_macros.h"
#include "core/text.h"

namespace rbln {
namespace {

// A bare --device-dram number below this (1 GiB) is refused: it is a unit
// forgotten ("16"), not a device.
constexpr uint64_t kMinBareDramBytes = uint64_t{1} << 30;

// The families of the spec table (core/device/device_spec.h).
constexpr const char* kSpecFamilies[] = {"RBLN-CA", "RBLN-CR"};

DeviceEntry EntryFor(const DeviceSpec& spec, absl::string_view name,
                     absl::string_view source) {
  DeviceEntry entry;
  entry.name = std::string(name);
  entry.family = spec.family;
  entry.total_bytes = spec.total_bytes_per_node;
  entry.available_bytes = spec.AvailablePerNode();
  entry.chiplets = spec.chiplets_per_node;
  entry.source = std::string(source);
  return entry;
}

class SpecTableProvider : public DramProvider {
 public:
  SpecTableProvider() {
    // Every family's source line, written once: Describe asks on every call.
    for (const char* name : kSpecFamilies) {
      const DeviceSpec spec = *LookupDeviceSpec(name);
      sources_[spec.family] = SourceOf(spec);
    }
  }

  // The table is part of the program: its answers never change.
  uint64_t AnswersGeneration() override { return 1; }

  absl::StatusOr<DramChoice> ForNpu(absl::string_view npu) override {
    if (npu.empty()) return NoNpuNamed("the probe is off");
    RBLN_ASSIGN_OR_RETURN(DeviceSpec spec, LookupDeviceSpec(npu));
    auto it = sources_.find(spec.family);
    return DramChoice{
        spec, it != sources_.end() ? it->second : SourceOf(spec), {}};
  }

  absl::StatusOr<std::vector<ProbedDevice>> ProbeNow() override {
    return NotALiveProbe("the spec table (the device probe is off)");
  }

  DeviceReport Report() override {
    DeviceReport report;
    report.source = "spec table (no device probe)";
    for (const char* name : kSpecFamilies) {
      report.devices.push_back(
          EntryFor(*LookupDeviceSpec(name), absl::StrCat(name, "*"), "spec"));
    }
    return report;
  }

 private:
  static std::string SourceOf(const DeviceSpec& spec) {
    return absl::StrCat("spec table: ", spec.family, "* has ",
                        FormatGib(spec.AvailablePerNode()),
                        " available per device (", spec.chiplets_per_node,
                        " chiplet(s) of ",
                        FormatGib(spec.AvailablePerChiplet()), ")");
  }

  absl::flat_hash_map<std::string, std::string> sources_;
};

class OverrideProvider : public DramProvider {
 public:
  explicit OverrideProvider(DramOverride dram) : dram_(dram) {}

  // Fixed at start-up.
  uint64_t AnswersGeneration() override { return 1; }

  absl::StatusOr<DramChoice> ForNpu(absl::string_view npu) override {
    uint32_t chiplets = 1;
    if (dram_.chiplets.has_value()) {
      chiplets = *dram_.chiplets;
    } else if (absl::StatusOr<DeviceSpec> spec = LookupDeviceSpec(npu);
               spec.ok()) {
      chiplets = spec->chiplets_per_node;
    }
    DeviceSpec spec{"override", dram_.bytes_per_node, chiplets, 0};
    return DramChoice{spec,
                      absl::StrCat("override (--device-dram): ",
                                   FormatGib(dram_.bytes_per_node),
                                   " per device, ", chiplets, " chiplet(s)"),
                      {}};
  }

  absl::StatusOr<std::vector<ProbedDevice>> ProbeNow() override {
    return NotALiveProbe("the override of the device DRAM (--device-dram)");
  }

  DeviceReport Report() override {
    DeviceReport report;
    report.source = "override (--device-dram)";
    DeviceSpec spec{"override", dram_.bytes_per_node,
                    dram_.chiplets.value_or(1), 0};
    report.devices.push_back(EntryFor(spec, "override", "override"));
    return report;
  }

 private:
  const DramOverride dram_;
};

}  // namespace

absl::StatusOr<std::vector<ProbedDevice>> DramProvider::ProbeNow() {
  return NotALiveProbe(Report().source);
}

absl::Status NotALiveProbe(absl::string_view source) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the DRAM figures come from ", source,
      ", not a live probe, so a `free` budget cannot be computed; give a "
      "byte budget, or reserve the other models with --beside"));
}

absl::Status NoNpuNamed(absl::string_view why_no_host_npu) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the artifact names no NPU (rbln_config.json has no npu, nor "
      "_compile_cfgs[].npu, nor do its graphs' headers say) and ",
      why_no_host_npu,
      "; give the daemon --device-dram (the DRAM of one device) to size it"));
}

std::unique_ptr<DramProvider> NewSpecTableProvider() {
  return std::make_unique<SpecTableProvider>();
}

absl::StatusOr<DramOverride> ParseDramOverride(absl::string_view text) {
  auto invalid = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device DRAM \"", Echo(text), "\" ", why,
        "; write BYTES[,CHIPLETS], e.g. 16GiB or 144GiB,4 or 17179869184"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  if (parts.size() > 2) return invalid("has more than one comma");
  DramOverride dram;
  bool bare = false;
  absl::StatusOr<uint64_t> bytes = ParseByteCount(parts[0], &bare);
  if (!bytes.ok()) {
    return invalid(
        absl::StrCat("does not start with a size: ", bytes.status().message()));
  }
  if (*bytes == 0) return invalid("is zero");
  // "16" is 16 GiB mistyped far more often than a 16-byte device; no NPU
  // has less than a gibibyte.
  if (bare && *bytes < kMinBareDramBytes) {
    const absl::string_view size = absl::StripAsciiWhitespace(parts[0]);
    return invalid(absl::StrCat("is a bare number below 1 GiB (did you mean ",
                                size, "GiB? write ", size, "B for bytes)"));
  }
  dram.bytes_per_node = *bytes;
  if (parts.size() == 2) {
    uint32_t chiplets = 0;
    if (!absl::SimpleAtoi(parts[1], &chiplets) || chiplets == 0 ||
        chiplets > 64) {
      return invalid("has a chiplet count that is not a whole number 1..64");
    }
    dram.chiplets = chiplets;
  }
  return dram;
}

std::unique_ptr<DramProvider> NewOverrideProvider(DramOverride dram) {
  return std::make_unique<OverrideProvider>(dram);
}

}  // namespace rbln
