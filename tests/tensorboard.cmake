# TensorBoard event files, read back with TensorBoard's own reader: the `tensorboard_venv`
# fixture installs the `tensorboard` package from PyPI into build/tensorboard-venv once.
set(PSFORMER_TENSORBOARD_VENV ${CMAKE_BINARY_DIR}/tensorboard-venv)
add_test(NAME tensorboard_venv COMMAND ${CMAKE_SOURCE_DIR}/tests/tensorboard/make_venv.sh ${PSFORMER_TENSORBOARD_VENV})
set_tests_properties(tensorboard_venv PROPERTIES FIXTURES_SETUP tensorboard_venv LABELS integration TIMEOUT 600)

add_executable(tensorboard_test tensorboard_test.cc)
target_link_libraries(tensorboard_test PRIVATE psformer_common GTest::gtest GTest::gtest_main)
target_compile_definitions(tensorboard_test PRIVATE PSFORMER_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                                    PSFORMER_BINARY="$<TARGET_FILE:psformer>"
                                                    PSFORMER_TENSORBOARD_PYTHON="${PSFORMER_TENSORBOARD_VENV}/bin/python")
add_dependencies(tensorboard_test psformer)
gtest_discover_tests(tensorboard_test NO_PRETTY_VALUES PROPERTIES LABELS integration FIXTURES_REQUIRED tensorboard_venv
                     TIMEOUT ${PSFORMER_TEST_TIMEOUT_integration} DISCOVERY_TIMEOUT 60)
