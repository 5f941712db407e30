# Links the project's programs against the static archives of gRPC,
# protobuf and Abseil that Debian ships, instead of their some 60 shared
# libraries (docs/performance.md):
#
#   rbln-artifact   starts as a whole process for each call (row 6): it
#                   loads one file instead of some 55, in half the time;
#   rbln-artifactd  spends its time in gRPC's small functions: without the
#                   calls between shared libraries, and their pages, it
#                   spends a fifth less CPU per call (row 5).
#
# OpenSSL stays shared, so that its security updates reach the programs
# without a rebuild; so do the system libraries. Sanitized and fuzzing
# builds link the usual way. -DRBLN_STATIC_GRPC=OFF links everything shared.
option(RBLN_STATIC_GRPC
       "Link rbln-artifactd and rbln-artifact against static gRPC, protobuf and Abseil"
       ON)
set(RBLN_GRPC_STATIC OFF)
if(RBLN_STATIC_GRPC AND NOT RBLN_SANITIZE AND NOT RBLN_FUZZ)
  pkg_check_modules(RBLN_GRPC_PC QUIET grpc++ protobuf)
  set(RBLN_GRPC_STATIC ${RBLN_GRPC_PC_FOUND})
  # System libraries and OpenSSL stay shared; every other one needs its
  # archive.
  set(rbln_grpc_archives grpc++_reflection ${RBLN_GRPC_PC_STATIC_LIBRARIES})
  list(REMOVE_ITEM rbln_grpc_archives atomic dl rt pthread m ssl crypto)
  list(REMOVE_DUPLICATES rbln_grpc_archives)
  foreach(lib IN LISTS rbln_grpc_archives)
    find_library(rbln_archive_${lib} NAMES lib${lib}.a NO_CACHE)
    if(NOT rbln_archive_${lib})
      message(STATUS "gRPC is linked shared: no lib${lib}.a")
      set(RBLN_GRPC_STATIC OFF)
    endif()
  endforeach()
  list(TRANSFORM rbln_grpc_archives PREPEND "-l")
  set(RBLN_GRPC_ARCHIVES ${rbln_grpc_archives})
endif()

# rbln_add_static_grpc_executable(NAME MAIN main.cc USES targets...
#                                 OWN libraries... SHARED targets...)
#
# The program NAME from MAIN, compiled with the usage requirements of USES.
# It links OWN, the project's static libraries it needs in link order, by
# file (their targets' usage requirements would bring the shared gRPC,
# protobuf and Abseil along), then the archives, then SHARED: the other
# libraries it needs, which must not depend on gRPC, protobuf or Abseil.
function(rbln_add_static_grpc_executable name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "MAIN" "USES;OWN;SHARED")
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
            ${arg_SHARED} OpenSSL::SSL OpenSSL::Crypto atomic -pthread
            ${CMAKE_DL_LIBS} rt)
endfunction()
