# The folders' layering (docs/architecture.md): every #include goes down the layers, so no folder
# includes one above it and the launcher reaches the backends only through backend_factory.h.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME check_layering COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check-layering)
  set_tests_properties(check_layering PROPERTIES LABELS unit TIMEOUT 120)
endif()

# The lock discipline of the threads' shared state (common/thread_annotations.h): the product's
# sources that use the annotations compiled with clang's thread safety analysis, as errors.
find_program(PSFORMER_THREAD_SAFETY_CLANGXX NAMES clang++-14 clang++)
if(Python3_Interpreter_FOUND AND PSFORMER_THREAD_SAFETY_CLANGXX AND NOT PSFORMER_FUZZ)
  add_test(NAME check_thread_safety COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/check-thread-safety
                                            ${CMAKE_BINARY_DIR})
  set_tests_properties(check_thread_safety PROPERTIES LABELS unit TIMEOUT 900
                       ENVIRONMENT "CLANG=${PSFORMER_THREAD_SAFETY_CLANGXX}")
elseif(NOT PSFORMER_FUZZ)
  message(STATUS "psformer: no clang++ (clang-14); the check_thread_safety test is left out")
endif()
