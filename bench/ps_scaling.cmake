# The data plane with emulated GPU workers (bench/RESULTS.md, "Data plane scaling"): drives real
# `psformer train` jobs, so it needs the psformer binary built beside it.
add_executable(ps_scaling ${CMAKE_CURRENT_SOURCE_DIR}/ps_scaling.cc)
target_link_libraries(ps_scaling PRIVATE psformer_common)
add_dependencies(ps_scaling psformer)
