psformer_test(training_test integration SOURCES training_test.cc LIBS psformer_common)
psformer_test(valid_bleu_test integration SOURCES valid_bleu_test.cc LIBS psformer_common)
# What the local trainer and a job's coordinator both write: each metrics line key by key, the
# validation BLEU files, early stopping, model.bin.
psformer_test(training_reporter_test unit SOURCES training_reporter_test.cc LIBS psformer_worker psformer_common)
psformer_test(divergence_test integration SOURCES divergence_test.cc LIBS psformer_common)
