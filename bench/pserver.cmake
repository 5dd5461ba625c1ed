# Parameter-server benchmarks (bench/RESULTS.md, "Parameter server").
add_executable(pserver_roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/pserver_roundtrip.cc)
target_link_libraries(pserver_roundtrip PRIVATE psformer_pserver psformer_common)
add_executable(pserver_allreduce ${CMAKE_CURRENT_SOURCE_DIR}/pserver_allreduce.cc)
target_link_libraries(pserver_allreduce PRIVATE MPI::MPI_C)
add_executable(streams_bench ${CMAKE_CURRENT_SOURCE_DIR}/streams_bench.cc)
target_link_libraries(streams_bench PRIVATE psformer_pserver psformer_common)
# Host memory passes (CRC, copy, copy + CRC, Adam) at 1, 2, 4 ... threads; bundled for GPU machines.
add_executable(psformer_host_passes ${CMAKE_CURRENT_SOURCE_DIR}/host_passes.cc)
target_link_libraries(psformer_host_passes PRIVATE psformer_pserver psformer_common)
set_target_properties(psformer_host_passes PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
# How long work handed to a worker's client thread waits while it waits for replies.
add_executable(client_handoff_bench ${CMAKE_CURRENT_SOURCE_DIR}/client_handoff_bench.cc)
target_link_libraries(client_handoff_bench PRIVATE psformer_worker psformer_pserver psformer_common)
