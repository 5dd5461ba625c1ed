# The Transformer on CPU: backend, layers, gradient checks, reference fixture, trainer.
psformer_test(model_grad_test unit SOURCES model_grad_test.cc LIBS psformer_model psformer_common)
psformer_test(philox_test unit SOURCES philox_test.cc LIBS psformer_model psformer_common)
psformer_test(model_reference_test unit SOURCES model_reference_test.cc LIBS psformer_model psformer_common)
psformer_test(model_file_test unit SOURCES model_file_test.cc LIBS psformer_worker psformer_common)
psformer_test(local_trainer_test unit SOURCES local_trainer_test.cc LIBS psformer_worker psformer_common)
psformer_test(copy_training_test integration SOURCES copy_training_test.cc LIBS psformer_pserver psformer_common)
psformer_test(cpu_backend_test unit SOURCES cpu_backend_test.cc LIBS psformer_model psformer_common)
psformer_test(blas_kernel_choice_test unit SOURCES blas_kernel_choice_test.cc LIBS psformer_model psformer_common)
