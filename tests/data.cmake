# Data pipeline suites: copy task, batching and sampling, corpus files, prepare.
add_executable(data_batch_dump data_batch_dump.cc)
target_link_libraries(data_batch_dump PRIVATE psformer_data)

psformer_test(data_test unit
  SOURCES batch_builder_test.cc copy_task_test.cc length_bucket_sampler_test.cc corpus_file_test.cc
          text_lines_test.cc
  LIBS psformer_data)
target_compile_definitions(data_test PRIVATE PSFORMER_DATA_BATCH_DUMP="$<TARGET_FILE:data_batch_dump>")
add_dependencies(data_test data_batch_dump)

psformer_test(prepare_test integration SOURCES prepare_test.cc LIBS psformer_data)
psformer_test(bible_corpus_test integration SOURCES bible_corpus_test.cc LIBS psformer_common)
