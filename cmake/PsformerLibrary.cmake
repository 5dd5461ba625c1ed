# psformer_folder_library(NAME DIR DEPS...): one static library from every .cc under DIR.
# A folder without sources yet becomes an interface library, so the tree builds at every step.
function(psformer_folder_library name dir)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${dir}/*.cc)
  list(FILTER srcs EXCLUDE REGEX ".*/main\\.cc$")
  list(FILTER srcs EXCLUDE REGEX ".*_test\\.cc$")
  if(srcs)
    add_library(${name} STATIC ${srcs})
    target_link_libraries(${name} PUBLIC ${ARGN})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${ARGN})
  endif()
endfunction()

# psformer_library(NAME DIRS dir... DEPS dep...): one static library from the .cc files directly in
# each of DIRS (relative to the calling folder; not their subfolders), for a folder that holds
# several libraries.
function(psformer_library name)
  cmake_parse_arguments(ARG "" "" "DIRS;DEPS" ${ARGN})
  set(srcs "")
  foreach(dir ${ARG_DIRS})
    file(GLOB dir_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cc)
    list(APPEND srcs ${dir_srcs})
  endforeach()
  list(FILTER srcs EXCLUDE REGEX ".*_test\\.cc$")
  add_library(${name} STATIC ${srcs})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()
