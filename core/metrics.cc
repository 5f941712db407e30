#include "core/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rbln {
namespace metrics {
namespace {

template <typename A, typename B>
bool LexicographicallyLess(absl::Span<const A> a, absl::Span<const B> b) {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(),
      [](absl::string_view x, absl::string_view y) { return x < y; });
}

// HELP text escapes only backslash and newline (format 0.0.4).
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void AppendSample(absl::string_view name, absl::string_view labels,
                  absl::string_view value, std::string* out) {
  absl::StrAppend(out, name);
  if (!labels.empty()) absl::StrAppend(out, "{", labels, "}");
  absl::StrAppend(out, " ", value, "\n");
}

}  // namespace

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::vector<double> DurationBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   30,    60,   120, 300,  600};
}

void Counter::AppendSamples(absl::string_view name, absl::string_view labels,
                            std::string* out) const {
  AppendSample(name, labels, absl::StrCat(value()), out);
}

void Gauge::AppendSamples(absl::string_view name, absl::string_view labels,
                          std::string* out) const {
  AppendSample(name, labels, absl::StrCat(value()), out);
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double value) {
  // A bucket counts observations up to and including its bound.
  const size_t bucket =
      std::lower_bound(bounds_->begin(), bounds_->end(), value) -
      bounds_->begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value,
                                     std::memory_order_relaxed)) {
  }
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_->size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

void Histogram::AppendSamples(absl::string_view name, absl::string_view labels,
                              std::string* out) const {
  // One snapshot, so that _count equals the +Inf bucket.
  const std::vector<uint64_t> counts = CumulativeCounts();
  const std::string bucket = absl::StrCat(name, "_bucket");
  const std::string prefix = labels.empty() ? "" : absl::StrCat(labels, ",");
  for (size_t i = 0; i < counts.size(); ++i) {
    const double bound = i < bounds_->size()
                             ? (*bounds_)[i]
                             : std::numeric_limits<double>::infinity();
    AppendSample(
        bucket,
        absl::StrCat(prefix, "le=", EscapeLabelValue(FormatValue(bound))),
        absl::StrCat(counts[i]), out);
  }
  AppendSample(absl::StrCat(name, "_sum"), labels, FormatValue(sum()), out);
  AppendSample(absl::StrCat(name, "_count"), labels,
               absl::StrCat(counts.back()), out);
}

bool LabelValuesLess::operator()(absl::Span<const std::string> a,
                                 absl::Span<const std::string> b) const {
  return LexicographicallyLess(a, b);
}
bool LabelValuesLess::operator()(absl::Span<const std::string> a,
                                 absl::Span<const absl::string_view> b) const {
  return LexicographicallyLess(a, b);
}
bool LabelValuesLess::operator()(absl::Span<const absl::string_view> a,
                                 absl::Span<const std::string> b) const {
  return LexicographicallyLess(a, b);
}

FamilyBase::FamilyBase(Type type, std::string name, std::string help,
                       std::vector<std::string> label_names)
    : type_(type),
      name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)) {}

Metric* FamilyBase::Child(absl::Span<const absl::string_view> values) {
  if (values.size() != label_names_.size()) {
    // A programming error: the call site and the family disagree.
    fprintf(stderr, "metric %s takes %zu label values, got %zu\n",
            name_.c_str(), label_names_.size(), values.size());
    std::abort();
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = children_.find(values);
    if (it != children_.end()) return it->second.get();
  }
  absl::MutexLock lock(&mu_);
  auto it = children_.find(values);
  if (it == children_.end()) {
    it = children_
             .emplace(std::vector<std::string>(values.begin(), values.end()),
                      NewChild())
             .first;
  }
  return it->second.get();
}

void FamilyBase::AppendExposition(std::string* out) const {
  const char* type = "counter";
  if (type_ == Type::kGauge) type = "gauge";
  if (type_ == Type::kHistogram) type = "histogram";
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n",
                  "# TYPE ", name_, " ", type, "\n");
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [values, child] : children_) {
    std::vector<std::string> pairs;
    for (size_t i = 0; i < values.size(); ++i) {
      pairs.push_back(
          absl::StrCat(label_names_[i], "=", EscapeLabelValue(values[i])));
    }
    child->AppendSamples(name_, absl::StrJoin(pairs, ","), out);
  }
}

std::unique_ptr<Metric> CounterFamily::NewChild() const {
  return std::make_unique<Counter>();
}

std::unique_ptr<Metric> GaugeFamily::NewChild() const {
  return std::make_unique<Gauge>();
}

std::unique_ptr<Metric> HistogramFamily::NewChild() const {
  return std::make_unique<Histogram>(&bounds_);
}

template <typename Family>
Family& Registry::Keep(std::unique_ptr<Family> family) {
  Family& added = *family;
  if (added.label_count() == 0) added.WithLabels({});
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return added;
}

CounterFamily& Registry::AddCounter(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  return Keep(std::make_unique<CounterFamily>(std::move(name), std::move(help),
                                              std::move(label_names)));
}

GaugeFamily& Registry::AddGauge(std::string name, std::string help,
                                std::vector<std::string> label_names) {
  return Keep(std::make_unique<GaugeFamily>(std::move(name), std::move(help),
                                            std::move(label_names)));
}

HistogramFamily& Registry::AddHistogram(std::string name, std::string help,
                                        std::vector<double> bounds,
                                        std::vector<std::string> label_names) {
  return Keep(std::make_unique<HistogramFamily>(
      std::move(name), std::move(help), std::move(bounds),
      std::move(label_names)));
}

std::optional<double> Registry::Sample(absl::string_view series) const {
  const std::string text = Exposition();
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) ||
        !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    double value = 0;
    if (line == "+Inf") return std::numeric_limits<double>::infinity();
    if (absl::SimpleAtod(line, &value)) return value;
  }
  return std::nullopt;
}

std::string Registry::Exposition() const {
  std::string out;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& family : families_) family->AppendExposition(&out);
  return out;
}

Registry& Registry::Default() {
  static Registry* const registry = new Registry();
  return *registry;
}

}  // namespace metrics
}  // namespace rbln
