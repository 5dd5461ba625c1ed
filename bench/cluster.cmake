# Push + pull between two hosts (bench/cluster_bench.sh runs it on a scripts/cluster-sim cluster).
add_executable(host_roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/host_roundtrip.cc)
target_link_libraries(host_roundtrip PRIVATE psformer_pserver psformer_common)
