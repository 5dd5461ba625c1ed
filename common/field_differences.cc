#include "common/field_differences.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

namespace psformer {
namespace {

namespace pb = google::protobuf;

void Walk(const pb::Message& a, const pb::Message& b, const std::string& prefix,
          const std::function<bool(const std::string&)>& skip, std::vector<FieldDifference>* out) {
  const pb::Descriptor* descriptor = a.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    const std::string path = prefix + field->name();
    if (skip && skip(path)) continue;
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && !field->is_repeated()) {
      Walk(a.GetReflection()->GetMessage(a, field), b.GetReflection()->GetMessage(b, field), path + ".", skip, out);
      continue;
    }
    std::string in_a = FieldText(a, field);
    std::string in_b = FieldText(b, field);
    if (in_a != in_b) out->push_back({path, std::move(in_a), std::move(in_b)});
  }
}

}  // namespace

std::vector<FieldDifference> FieldDifferences(const pb::Message& a, const pb::Message& b,
                                              const std::function<bool(const std::string&)>& skip) {
  std::vector<FieldDifference> differences;
  Walk(a, b, "", skip, &differences);
  return differences;
}

std::string FieldText(const pb::Message& message, const pb::FieldDescriptor* field) {
  std::string text;
  if (!field->is_repeated()) {
    pb::TextFormat::PrintFieldValueToString(message, field, -1, &text);
    return text;
  }
  text = "[";
  for (int i = 0; i < message.GetReflection()->FieldSize(message, field); ++i) {
    std::string item;
    pb::TextFormat::PrintFieldValueToString(message, field, i, &item);
    text += (i > 0 ? ", " : "") + item;
  }
  return text + "]";
}

}  // namespace psformer
