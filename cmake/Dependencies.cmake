# Finds every external dependency through its CMake or pkg-config files.
# scripts/setup installs all of them from Debian's packages.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(GTest REQUIRED)
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)  # AES-256-GCM payload sealing (cluster.encryption)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

# ZeroMQ (libzmq and the header-only cppzmq) by hand, not through pkg-config: Debian's libzmq.pc
# lists "-isystem /usr/include/mit-krb5" among its Cflags, which CMake files under the include
# directories on the first configure and under the compile flags on the second. Every flags.make
# changed, so a second `scripts/build` recompiled the whole tree. zmq.h and zmq.hpp need none of
# those directories.
find_path(ZMQ_INCLUDE_DIR zmq.h REQUIRED)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)
find_library(ZMQ_LIBRARY zmq REQUIRED)
add_library(psformer::zmq UNKNOWN IMPORTED)
set_target_properties(psformer::zmq PROPERTIES IMPORTED_LOCATION ${ZMQ_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES "${ZMQ_INCLUDE_DIR};${CPPZMQ_INCLUDE_DIR}")

# CUDA: compiled whenever the toolkit is found (AUTO), required with ON, skipped with OFF.
set(PSFORMER_HAVE_CUDA OFF)
if(NOT PSFORMER_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(PSFORMER_HAVE_CUDA ON)
  elseif(PSFORMER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PSFORMER_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
message(STATUS "psformer: CUDA backend ${PSFORMER_HAVE_CUDA}")

# Debian's libsentencepiece carries its own protobuf (3.14) and exports those symbols; next to the
# shared libprotobuf (3.21) in one process, each library binds to parts of the other and the
# program crashes before main(). So link protobuf statically and keep its symbols out of the
# dynamic symbol table: psformer's code uses its copy, libsentencepiece its own.
find_library(PSFORMER_PROTOBUF_STATIC NAMES libprotobuf.a)
if(PSFORMER_PROTOBUF_STATIC AND TARGET protobuf::libprotobuf)
  find_package(ZLIB REQUIRED)
  foreach(property IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_DEBUG)
    get_target_property(location protobuf::libprotobuf ${property})
    if(location)
      set_target_properties(protobuf::libprotobuf PROPERTIES ${property} ${PSFORMER_PROTOBUF_STATIC})
    endif()
  endforeach()
  set_property(TARGET protobuf::libprotobuf APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:--exclude-libs,libprotobuf.a")
  set_property(TARGET protobuf::libprotobuf APPEND PROPERTY INTERFACE_LINK_LIBRARIES ZLIB::ZLIB Threads::Threads)
endif()
