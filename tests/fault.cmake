# Fault injection: whole training jobs with processes killed, stalled and cut off,
# compared bitwise with undisturbed runs.
psformer_test(fault_test fault SOURCES fault_test.cc LIBS psformer_common)
psformer_test(reproducibility_test fault SOURCES reproducibility_test.cc LIBS psformer_common)
psformer_test(host_summing_job_test fault SOURCES host_summing_job_test.cc LIBS psformer_common)
# A job beside a process that holds most of the (cgroup's) threads: the hog waits 6 s, the
# supervisor's waits for the machine up to 90 s, each on top of a job of about 30 s.
psformer_test(thread_hog_job_test fault SOURCES thread_hog_job_test.cc LIBS psformer_common TIMEOUT 400)
