# psformer export (label `export`). export_command_test: the command and its files, on random
# models. export_model_test: a trained model's export loaded by transformers and CTranslate2,
# which the setup tests of the fixture `export_fixtures` provide (one name: gtest_discover_tests
# would split a list of fixtures): `export_venv` installs them from PyPI into build/export-venv
# once (tests/export/make_venv.sh), `export_model` trains and exports a POST_LN model (MarianMTModel)
# into build/export-model, `export_model_pre_ln` a PRE_LN one (Pegasus) into
# build/export-model-pre-ln (tests/export/train_model.sh, about a minute each).
psformer_test(export_command_test export SOURCES export_command_test.cc LIBS psformer_export psformer_model psformer_common)

set(PSFORMER_EXPORT_VENV ${CMAKE_BINARY_DIR}/export-venv)
set(PSFORMER_EXPORT_MODEL ${CMAKE_BINARY_DIR}/export-model)
set(PSFORMER_EXPORT_MODEL_PRE_LN ${CMAKE_BINARY_DIR}/export-model-pre-ln)
add_test(NAME export_venv COMMAND ${CMAKE_SOURCE_DIR}/tests/export/make_venv.sh ${PSFORMER_EXPORT_VENV})
set_tests_properties(export_venv PROPERTIES FIXTURES_SETUP export_fixtures LABELS export TIMEOUT 1200)
add_test(NAME export_model COMMAND ${CMAKE_SOURCE_DIR}/tests/export/train_model.sh $<TARGET_FILE:psformer>
                                   ${PSFORMER_EXPORT_MODEL})
set_tests_properties(export_model PROPERTIES FIXTURES_SETUP export_fixtures LABELS export TIMEOUT 600)
add_test(NAME export_model_pre_ln COMMAND ${CMAKE_SOURCE_DIR}/tests/export/train_model.sh $<TARGET_FILE:psformer>
                                          ${PSFORMER_EXPORT_MODEL_PRE_LN} --set model.norm_position=PRE_LN)
set_tests_properties(export_model_pre_ln PROPERTIES FIXTURES_SETUP export_fixtures LABELS export TIMEOUT 600)

add_executable(export_model_test export_model_test.cc)
target_link_libraries(export_model_test PRIVATE psformer_model psformer_data psformer_common GTest::gtest
                                                GTest::gtest_main)
target_compile_definitions(export_model_test PRIVATE PSFORMER_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                                     PSFORMER_BINARY="$<TARGET_FILE:psformer>"
                                                     PSFORMER_EXPORT_VENV="${PSFORMER_EXPORT_VENV}"
                                                     PSFORMER_EXPORT_MODEL="${PSFORMER_EXPORT_MODEL}"
                                                     PSFORMER_EXPORT_MODEL_PRE_LN="${PSFORMER_EXPORT_MODEL_PRE_LN}")
add_dependencies(export_model_test psformer)
gtest_discover_tests(export_model_test NO_PRETTY_VALUES PROPERTIES LABELS export FIXTURES_REQUIRED export_fixtures
                     TIMEOUT ${PSFORMER_TEST_TIMEOUT_export} DISCOVERY_TIMEOUT 60)
