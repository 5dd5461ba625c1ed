// Test helper: prints the digest of the copy task's training batches, so that a test can
// check that another process (another address-space layout, another start) computes the
// same batch sequence.   usage: data_batch_dump SEED WORKERS FIRST_STEP LAST_STEP
#include <cstdlib>
#include <iostream>
#include <string>

#include "common/config_loader.h"
#include "tests/batch_digest.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: data_batch_dump SEED WORKERS FIRST_STEP LAST_STEP\n";
    return 2;
  }
  psformer::proto::JobConfig config;
  psformer::FillDefaults(&config);
  config.mutable_training()->set_seed(std::strtoull(argv[1], nullptr, 10));
  config.mutable_data()->set_copy_train_size(3000);
  config.mutable_batching()->set_src_tokens_per_step(300);
  config.mutable_batching()->set_tgt_tokens_per_step(300);
  auto source = psformer::MakeBatchSource(config);
  if (!source.ok()) {
    std::cerr << "data_batch_dump: " << source.status().message() << "\n";
    return 1;
  }
  std::cout << psformer::testing::DigestSteps(**source, std::atoll(argv[3]), std::atoll(argv[4]), std::atoi(argv[2]));
  return 0;
}
