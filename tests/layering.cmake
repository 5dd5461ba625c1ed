# The folders' layering (docs/architecture.md): every #include goes down the layers, so no folder
# includes one above it and the launcher reaches the backends only through backend_factory.h.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME check_layering COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check-layering)
  set_tests_properties(check_layering PROPERTIES LABELS unit TIMEOUT 120)
endif()
