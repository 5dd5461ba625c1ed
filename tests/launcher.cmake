psformer_test(launcher_test integration SOURCES launcher_test.cc LIBS psformer_launcher)
psformer_test(cluster_plan_test unit SOURCES cluster_plan_test.cc role_arguments_test.cc supervisor_log_test.cc
  mpirun_session_directory_test.cc
  LIBS psformer_launcher)
psformer_test(launch_errors_test integration SOURCES launch_errors_test.cc LIBS psformer_model)
psformer_test(resume_test fault SOURCES resume_test.cc LIBS psformer_common)
psformer_test(status_test integration SOURCES status_test.cc LIBS psformer_common)
psformer_test(plot_test integration SOURCES plot_test.cc LIBS psformer_common)
psformer_test(run_directory_test integration SOURCES run_directory_test.cc LIBS psformer_launcher)
psformer_test(memory_estimate_test integration SOURCES memory_estimate_test.cc LIBS psformer_launcher)
psformer_test(checkpoint_failure_test fault SOURCES checkpoint_failure_test.cc LIBS psformer_common)
psformer_test(server_scalars_test unit SOURCES server_scalars_test.cc LIBS psformer_launcher)
psformer_test(role_supervisor_test integration SOURCES role_supervisor_test.cc LIBS psformer_launcher)

# Kills rank 0 of an mpirun job in MPI_Finalize, for launch_errors_test (LD_PRELOAD of every rank).
add_library(rank0_dies_in_mpi_finalize MODULE rank0_dies_in_mpi_finalize.cc)
target_link_libraries(rank0_dies_in_mpi_finalize PRIVATE ${CMAKE_DL_LIBS})
target_compile_definitions(launch_errors_test
  PRIVATE RANK0_DIES_IN_MPI_FINALIZE="$<TARGET_FILE:rank0_dies_in_mpi_finalize>")
add_dependencies(launch_errors_test rank0_dies_in_mpi_finalize)
