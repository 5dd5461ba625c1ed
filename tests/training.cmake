psformer_test(training_test integration SOURCES training_test.cc LIBS psformer_common)
