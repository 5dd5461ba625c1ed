# BLAS libraries side by side at the shapes of a training step (bench/RESULTS.md, "BLAS libraries";
# run by bench/blas_libraries_bench.sh). The bench loads each library at run time, so it builds
# without any of them; psformer_gemm_shapes lists the step's products from the model itself.
add_executable(psformer_gemm_shapes gemm_shapes.cc)
target_link_libraries(psformer_gemm_shapes PRIVATE psformer_model psformer_common)
set_target_properties(psformer_gemm_shapes PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_executable(blas_libraries_bench blas_libraries_bench.cc)
target_link_libraries(blas_libraries_bench PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(blas_libraries_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
