# Links the project's programs against the static archives of gRPC (with
# its own gpr, upb, address_sorting and RE2), protobuf and Abseil that
# Debian ships, instead of their some 60 shared libraries
# (docs/performance.md):
#
#   rbln-artifact   starts as a whole process for each call (row 6): it
#                   loads a few files instead of some 55;
#   rbln-artifactd  spends its time in gRPC's small functions: without the
#                   calls between shared libraries, and their pages, it
#                   spends a fifth less CPU per call (row 5).
#
# OpenSSL, c-ares (DNS) and zlib stay shared, so that their security
# updates reach the programs without a rebuild; so do the system libraries.
# Sanitized and fuzzing builds link the usual way. -DRBLN_STATIC_GRPC=OFF
# links everything shared.
option(RBLN_STATIC_GRPC
       "Link rbln-artifactd and rbln-artifact against static gRPC, protobuf and Abseil"
       ON)
# The CLI-only option this one replaced.
if(DEFINED RBLN_STATIC_CLI AND NOT RBLN_STATIC_CLI)
  message(WARNING "RBLN_STATIC_CLI is now RBLN_STATIC_GRPC (both programs); "
                  "taking RBLN_STATIC_CLI=OFF as RBLN_STATIC_GRPC=OFF")
  set(RBLN_STATIC_GRPC OFF)
endif()
# Whether the programs are linked against the archives: RBLN_STATIC_GRPC,
# and every archive found.
set(RBLN_LINK_GRPC_ARCHIVES OFF)
if(RBLN_STATIC_GRPC AND NOT RBLN_SANITIZE AND NOT RBLN_FUZZ)
  pkg_check_modules(RBLN_GRPC_PC QUIET grpc++ protobuf)
  set(RBLN_LINK_GRPC_ARCHIVES ${RBLN_GRPC_PC_FOUND})
  if(NOT RBLN_GRPC_PC_FOUND)
    message(WARNING "gRPC is linked shared: pkg-config knows no grpc++ or "
                    "protobuf (configure with -DRBLN_STATIC_GRPC=OFF to link "
                    "shared without this warning)")
  endif()
  set(rbln_grpc_archives grpc++_reflection ${RBLN_GRPC_PC_STATIC_LIBRARIES})
  list(REMOVE_ITEM rbln_grpc_archives atomic dl rt pthread m ssl crypto cares
       z)
  list(REMOVE_DUPLICATES rbln_grpc_archives)
  foreach(lib IN LISTS rbln_grpc_archives)
    find_library(rbln_archive_${lib} NAMES lib${lib}.a NO_CACHE)
    if(NOT rbln_archive_${lib})
      message(WARNING "gRPC is linked shared: no lib${lib}.a (configure "
                      "with -DRBLN_STATIC_GRPC=OFF to link shared without "
                      "this warning)")
      set(RBLN_LINK_GRPC_ARCHIVES OFF)
    endif()
  endforeach()
  list(TRANSFORM rbln_grpc_archives PREPEND "-l")
  set(RBLN_GRPC_ARCHIVES ${rbln_grpc_archives})
  pkg_check_modules(RBLN_CARES REQUIRED IMPORTED_TARGET libcares)
  find_package(ZLIB REQUIRED)
endif()

# rbln_add_static_grpc_executable(NAME MAIN main.cc USES targets...
#                                 OWN libraries... [SHARED targets...])
#
# The program NAME from MAIN, compiled with the usage requirements of USES.
# It links OWN, the project's static libraries it needs in link order, by
# file (their targets' usage requirements would bring the shared gRPC,
# protobuf and Abseil along), then the archives, then SHARED: the other
# libraries it needs, which must not depend on gRPC, protobuf or Abseil.
function(rbln_add_static_grpc_executable name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "MAIN" "USES;OWN;SHARED")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_MAIN OR NOT arg_OWN)
    message(FATAL_ERROR "rbln_add_static_grpc_executable(${name}): takes "
                        "MAIN, USES, OWN and SHARED; got ${ARGN}")
  endif()
  foreach(shared IN LISTS arg_SHARED)
    get_target_property(deps ${shared} INTERFACE_LINK_LIBRARIES)
    if(deps MATCHES "gRPC::|protobuf::|absl::|libgrpc|libprotobuf|libabsl")
      message(FATAL_ERROR "rbln_add_static_grpc_executable(${name}): "
                          "${shared} links gRPC, protobuf or Abseil shared")
    endif()
  endforeach()
  add_library(${name}_main OBJECT ${arg_MAIN})
  target_link_libraries(${name}_main PRIVATE ${arg_USES})
  add_executable(${name} $<TARGET_OBJECTS:${name}_main>)
  add_dependencies(${name} ${arg_OWN})
  set(own ${arg_OWN})
  list(TRANSFORM own REPLACE "(.+)" "$<TARGET_FILE:\\1>")
  target_link_libraries(
    ${name}
    PRIVATE ${own} -Wl,--push-state,-Bstatic -Wl,--start-group
            ${RBLN_GRPC_ARCHIVES} -Wl,--end-group -Wl,--pop-state
            ${arg_SHARED} OpenSSL::SSL OpenSSL::Crypto PkgConfig::RBLN_CARES
            ZLIB::ZLIB atomic -pthread ${CMAKE_DL_LIBS} rt)
endfunction()
