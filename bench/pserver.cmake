# Parameter-server benchmarks (bench/RESULTS.md, "Parameter server").
add_executable(pserver_roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/pserver_roundtrip.cc)
target_link_libraries(pserver_roundtrip PRIVATE psformer_pserver psformer_common)
add_executable(pserver_allreduce ${CMAKE_CURRENT_SOURCE_DIR}/pserver_allreduce.cc)
target_link_libraries(pserver_allreduce PRIVATE MPI::MPI_C)
add_executable(streams_bench ${CMAKE_CURRENT_SOURCE_DIR}/streams_bench.cc)
target_link_libraries(streams_bench PRIVATE psformer_pserver psformer_common)
