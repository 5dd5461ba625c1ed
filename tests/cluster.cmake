# `psformer launch` (unit: the hostfile, host choice and mpirun line) and jobs across hosts of a
# cluster simulated with network namespaces (cluster: scripts/cluster-sim; needs root, skipped
# with the reason elsewhere; each test brings up hosts of its own).
psformer_test(launch_test unit SOURCES launch_test.cc LIBS psformer_launcher)
psformer_test(cluster_test cluster SOURCES cluster_test.cc LIBS psformer_common)
