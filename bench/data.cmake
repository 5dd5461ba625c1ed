# Data pipeline benchmark (bench/RESULTS.md, "Data"): prepare throughput and sampler cost.
add_executable(psformer_data_bench data_bench.cc)
target_link_libraries(psformer_data_bench PRIVATE psformer_data psformer_common)
set_target_properties(psformer_data_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
