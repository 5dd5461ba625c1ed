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
