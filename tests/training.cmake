psformer_test(training_test integration SOURCES training_test.cc LIBS psformer_common)
psformer_test(valid_bleu_test integration SOURCES valid_bleu_test.cc LIBS psformer_common)
