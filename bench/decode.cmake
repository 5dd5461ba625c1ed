# Translation speed (bench/RESULTS.md, "## Translation").
add_executable(decode_bench ${CMAKE_CURRENT_SOURCE_DIR}/decode_bench.cc)
target_link_libraries(decode_bench PRIVATE psformer_translate psformer_common Boost::program_options)
