// A small Prometheus metrics registry: counters, gauges and histograms with
// labels, and their text exposition (format 0.0.4, what every Prometheus server
// scrapes). Debian has no Prometheus client library for C++, so this is our
// own; it holds no HTTP (server/metrics_http.h serves the text).
//
// Counting is cheap: a Counter, Gauge or Histogram is a few atomics, updated
// without a lock. Finding the child of a family for label values takes a reader
// lock (a writer lock the first time those values are seen), so callers on a
// hot path look a child up once and keep the reference; children live as long
// as their registry.
//
// Names must be valid Prometheus metric and label names, unique within a
// registry; a counter's name ends in _total, a gauge's does not. The
// registry does not check
// them: they are constants of the program, and core/metrics_test.cc checks
// the daemon's.
//
// Thread-safe: every method may be called from any thread.
#ifndef RBLN_CORE_METRICS_H_
#define RBLN_CORE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace rbln {
namespace metrics {

// One child of a family: writes its sample lines.
class Metric {
 public:
  virtual ~Metric() = default;
  // Appends the sample lines of `name` with `labels` (`a="x",b="y"`, without
  // braces; empty for none) to `out`.
  virtual void AppendSamples(absl::string_view name, absl::string_view labels,
                             std::string* out) const = 0;
};

// A count that only goes up.
class Counter final : public Metric {
 public:
  void Increment(uint64_t n = 1) {
    value_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

  void AppendSamples(absl::string_view name, absl::string_view labels,
                     std::string* out) const override;

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down (things held now).
class Gauge final : public Metric {
 public:
  void Set(int64_t value) { value_.store(value, std::memory_order_relaxed); }
  void Add(int64_t delta) {
    value_.fetch_add(delta, std::memory_order_relaxed);
  }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

  void AppendSamples(absl::string_view name, absl::string_view labels,
                     std::string* out) const override;

 private:
  std::atomic<int64_t> value_{0};
};

// Observations counted into fixed buckets, with their sum.
class Histogram final : public Metric {
 public:
  // `bounds`: the buckets' upper bounds, ascending, without +Inf; must
  // outlive the histogram (its family owns them).
  explicit Histogram(const std::vector<double>* bounds);

  void Observe(double value);

  // Cumulative counts per bound, then +Inf (the total count); and the sum.
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

  void AppendSamples(absl::string_view name, absl::string_view labels,
                     std::string* out) const override;

 private:
  const std::vector<double>* const bounds_;
  // Per bucket, not cumulative (one increment per observation); the last
  // is the +Inf bucket.
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// Orders label-value tuples, and finds one by a tuple of string_views
// without building a key.
struct LabelValuesLess {
  using is_transparent = void;
  bool operator()(absl::Span<const std::string> a,
                  absl::Span<const std::string> b) const;
  bool operator()(absl::Span<const std::string> a,
                  absl::Span<const absl::string_view> b) const;
  bool operator()(absl::Span<const absl::string_view> a,
                  absl::Span<const std::string> b) const;
};

// The children of one metric name, one per tuple of label values.
class FamilyBase {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  FamilyBase(Type type, std::string name, std::string help,
             std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  // Appends this family's exposition (# HELP, # TYPE, one line per sample;
  // children in order of their label values) to `out`.
  void AppendExposition(std::string* out) const;

  size_t label_count() const { return label_names_.size(); }

 protected:
  // The child for `values` (one per label name, else the program is wrong:
  // it aborts), created with NewChild() on first use.
  Metric* Child(absl::Span<const absl::string_view> values);

 private:
  virtual std::unique_ptr<Metric> NewChild() const = 0;

  const Type type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>, LabelValuesLess>
      children_ ABSL_GUARDED_BY(mu_);
};

class CounterFamily : public FamilyBase {
 public:
  CounterFamily(std::string name, std::string help,
                std::vector<std::string> label_names)
      : FamilyBase(Type::kCounter, std::move(name), std::move(help),
                   std::move(label_names)) {}

  // The counter for these label values (as many as the family has names).
  Counter& WithLabels(std::initializer_list<absl::string_view> values) {
    return *static_cast<Counter*>(Child(values));
  }
  Counter& WithLabels(absl::Span<const absl::string_view> values) {
    return *static_cast<Counter*>(Child(values));
  }

 private:
  std::unique_ptr<Metric> NewChild() const override;
};

class GaugeFamily : public FamilyBase {
 public:
  GaugeFamily(std::string name, std::string help,
              std::vector<std::string> label_names)
      : FamilyBase(Type::kGauge, std::move(name), std::move(help),
                   std::move(label_names)) {}

  Gauge& WithLabels(std::initializer_list<absl::string_view> values) {
    return *static_cast<Gauge*>(Child(values));
  }
  Gauge& WithLabels(absl::Span<const absl::string_view> values) {
    return *static_cast<Gauge*>(Child(values));
  }

 private:
  std::unique_ptr<Metric> NewChild() const override;
};

class HistogramFamily : public FamilyBase {
 public:
  HistogramFamily(std::string name, std::string help,
                  std::vector<double> bounds,
                  std::vector<std::string> label_names)
      : FamilyBase(Type::kHistogram, std::move(name), std::move(help),
                   std::move(label_names)),
        bounds_(std::move(bounds)) {}

  Histogram& WithLabels(std::initializer_list<absl::string_view> values) {
    return *static_cast<Histogram*>(Child(values));
  }
  Histogram& WithLabels(absl::Span<const absl::string_view> values) {
    return *static_cast<Histogram*>(Child(values));
  }

 private:
  std::unique_ptr<Metric> NewChild() const override;

  const std::vector<double> bounds_;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // A family without labels has its one child from the start, so that it is
  // exported (at 0) before anything counts.
  CounterFamily& AddCounter(std::string name, std::string help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(std::string name, std::string help,
                        std::vector<std::string> label_names = {});
  // `bounds`: upper bounds of the buckets, ascending (+Inf is implied).
  HistogramFamily& AddHistogram(std::string name, std::string help,
                                std::vector<double> bounds,
                                std::vector<std::string> label_names = {});

  // The text exposition of every family, in the order they were added.
  std::string Exposition() const;

  // The value of one series as Exposition() writes it (`name{labels}`,
  // labels in the family's order, `_bucket`/`_sum`/`_count` for
  // histograms); nullopt when there is no such series. For tests and
  // diagnostics: it formats the whole exposition.
  std::optional<double> Sample(absl::string_view series) const;

  // The process's registry: what the daemon exports.
  static Registry& Default();

 private:
  // Adds `family`, with its one child when it has no labels.
  template <typename Family>
  Family& Keep(std::unique_ptr<Family> family);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// The content type of Registry::Exposition() for HTTP.
inline constexpr char kExpositionContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

// `value` as the exposition writes a sample or a bound: the shortest text
// that reads back as the same double; +Inf, -Inf, NaN.
std::string FormatValue(double value);

// A label value quoted for the exposition: backslash, double quote and
// newline escaped.
std::string EscapeLabelValue(absl::string_view value);

// Buckets for durations in seconds: 1 ms to 10 min.
std::vector<double> DurationBuckets();

}  // namespace metrics
}  // namespace rbln

#endif  // RBLN_CORE_METRICS_H_
