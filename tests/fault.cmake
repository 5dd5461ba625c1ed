# Fault injection: whole training jobs with processes killed, stalled and cut off,
# compared bitwise with undisturbed runs.
psformer_test(fault_test fault SOURCES fault_test.cc LIBS psformer_common)
psformer_test(reproducibility_test fault SOURCES reproducibility_test.cc LIBS psformer_common)
psformer_test(host_summing_job_test fault SOURCES host_summing_job_test.cc LIBS psformer_common)
