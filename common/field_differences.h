// Which fields of two messages of one type (two job configs) hold different values, by dotted
// path, as the config file would spell each value: what `train --resume` names when a config
// differs from its run's, and what the ranks of an mpirun job name when the configs they loaded
// on their hosts differ.
#ifndef PSFORMER_COMMON_FIELD_DIFFERENCES_H_
#define PSFORMER_COMMON_FIELD_DIFFERENCES_H_

#include <google/protobuf/message.h>

#include <functional>
#include <string>
#include <vector>

namespace psformer {

struct FieldDifference {
  std::string path;  // "training.warmup_steps"
  std::string a;     // the value in the first message ("4000"; a repeated field as "[x, y]")
  std::string b;     // ... in the second
};

// Every field whose values differ, in declaration order, sub-messages walked into. A field left
// unset and one set to its default hold the same value. `skip(path)`, where given, leaves a field
// out (a sub-message's path leaves out the whole of it). REQUIRES: a and b of one type.
std::vector<FieldDifference> FieldDifferences(const google::protobuf::Message& a, const google::protobuf::Message& b,
                                              const std::function<bool(const std::string& path)>& skip = {});

// The text of one field's value(s) in `message`, as the config file would spell it.
std::string FieldText(const google::protobuf::Message& message, const google::protobuf::FieldDescriptor* field);

}  // namespace psformer

#endif  // PSFORMER_COMMON_FIELD_DIFFERENCES_H_
