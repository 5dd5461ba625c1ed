psformer_test(launcher_test integration SOURCES launcher_test.cc LIBS psformer_launcher)
psformer_test(cluster_plan_test unit SOURCES cluster_plan_test.cc LIBS psformer_launcher)
psformer_test(launch_errors_test integration SOURCES launch_errors_test.cc LIBS psformer_worker)
psformer_test(resume_test fault SOURCES resume_test.cc LIBS psformer_common)
