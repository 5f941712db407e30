#include "core/device/rbln_smi.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/budget.h"

namespace rbln {
namespace {

// The columns we read, by their header names.
constexpr absl::string_view kNpuColumn = "NPU";
constexpr absl::string_view kNameColumn = "Name";
constexpr absl::string_view kDeviceColumn = "Device";
constexpr absl::string_view kMemoryColumn = "Memory(used/total)";

// A line of a box: "| a | b |" has cells {"a", "b"}; `closed` says whether
// it ends with the box's right edge (a line cut short does not).
struct BoxLine {
  std::vector<absl::string_view> cells;
  bool closed = false;
};

// Lines inside a box start with '|'; others (borders, text) are nullopt.
std::optional<BoxLine> SplitBoxLine(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&line, "|")) return std::nullopt;
  BoxLine box;
  box.closed = absl::ConsumeSuffix(&line, "|");
  for (absl::string_view cell : absl::StrSplit(line, '|')) {
    box.cells.push_back(absl::StripAsciiWhitespace(cell));
  }
  return box;
}

// "+-----+----+" and "+=====+====+": the borders between and around boxes.
bool IsBorder(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  return absl::StartsWith(line, "+") &&
         line.find_first_not_of("+-=") == absl::string_view::npos;
}

// Header names compare without case and spaces ("Memory (used/total)").
std::string HeaderKey(absl::string_view name) {
  std::string key;
  for (char c : name) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) {
      key += absl::ascii_tolower(static_cast<unsigned char>(c));
    }
  }
  return key;
}

struct Columns {
  size_t npu = 0;
  size_t name = 0;
  size_t device = 0;
  size_t memory = 0;
  size_t count = 0;  // cells in the header
};

// The columns of a header row, or the names it lacks. A row without an NPU
// column is not a device table header at all (nullopt).
std::optional<absl::StatusOr<Columns>> ReadHeader(const BoxLine& row) {
  std::optional<size_t> found[4];
  const absl::string_view names[4] = {kNpuColumn, kNameColumn, kDeviceColumn,
                                      kMemoryColumn};
  for (size_t i = 0; i < row.cells.size(); ++i) {
    for (int c = 0; c < 4; ++c) {
      if (!found[c].has_value() &&
          HeaderKey(row.cells[i]) == HeaderKey(names[c])) {
        found[c] = i;
      }
    }
  }
  if (!found[0].has_value()) return std::nullopt;
  std::vector<absl::string_view> missing;
  for (int c = 1; c < 4; ++c) {
    if (!found[c].has_value()) missing.push_back(names[c]);
  }
  if (!missing.empty()) {
    return absl::StatusOr<Columns>(absl::InvalidArgumentError(absl::StrCat(
        "the device table header has no ", absl::StrJoin(missing, ", "),
        " column (it has ", absl::StrJoin(row.cells, ", "), ")")));
  }
  return absl::StatusOr<Columns>(
      Columns{*found[0], *found[1], *found[2], *found[3], row.cells.size()});
}

// One device row; `where` names the line for errors.
absl::StatusOr<ProbedDevice> ReadRow(const BoxLine& row, int index,
                                     const Columns& columns,
                                     absl::string_view where) {
  if (!row.closed || row.cells.size() < columns.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated table: ", where, " has ", row.cells.size(),
                     " cell(s)", row.closed ? "" : " and no right edge",
                     ", the header ", columns.count));
  }
  ProbedDevice device;
  device.index = index;
  device.name = std::string(row.cells[columns.name]);
  device.device_node = std::string(row.cells[columns.device]);
  if (device.name.empty() || device.device_node.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has an empty Name or Device cell"));
  }
  const absl::string_view memory = row.cells[columns.memory];
  std::vector<absl::string_view> sizes = absl::StrSplit(memory, '/');
  if (sizes.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": memory \"", absl::CEscape(memory), "\" is not USED / TOTAL"));
  }
  absl::StatusOr<uint64_t> used =
      ParseByteSize(absl::StripAsciiWhitespace(sizes[0]), ByteUnits::kDecimal);
  if (!used.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": memory used: ", used.status().message()));
  }
  absl::StatusOr<uint64_t> total =
      ParseByteSize(absl::StripAsciiWhitespace(sizes[1]), ByteUnits::kDecimal);
  if (!total.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": memory total: ", total.status().message()));
  }
  if (*total == 0 || *used > *total) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": memory \"", absl::CEscape(memory),
                     "\" is not a used size within a non-zero total"));
  }
  device.used_bytes = *used;
  device.total_bytes = *total;
  return device;
}

}  // namespace

absl::StatusOr<std::vector<ProbedDevice>> ParseRblnSmi(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  std::optional<Columns> columns;
  size_t line_number = 0;
  for (; line_number < lines.size() && !columns.has_value(); ++line_number) {
    std::optional<BoxLine> row = SplitBoxLine(lines[line_number]);
    if (!row.has_value()) continue;
    std::optional<absl::StatusOr<Columns>> header = ReadHeader(*row);
    if (!header.has_value()) continue;
    if (!header->ok()) return header->status();
    columns = **header;
  }
  if (!columns.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no device table header (a row with ", kNpuColumn, ", ",
                     kNameColumn, ", ", kDeviceColumn, " and ", kMemoryColumn,
                     " columns) in ", text.size(), " bytes of output"));
  }

  // The border right below the header separates it from the rows; the next
  // border closes the box.
  std::vector<ProbedDevice> devices;
  bool below_header = true;
  for (; line_number < lines.size(); ++line_number) {
    const absl::string_view line = lines[line_number];
    const std::string where = absl::StrCat("line ", line_number + 1);
    if (IsBorder(line)) {
      if (below_header) {
        below_header = false;
        continue;
      }
      if (devices.empty()) {
        return absl::InvalidArgumentError(
            "no devices: the device table lists no NPU");
      }
      return devices;
    }
    below_header = false;
    std::optional<BoxLine> row = SplitBoxLine(line);
    int index = 0;
    if (!row.has_value() || row->cells.size() <= columns->npu ||
        !absl::SimpleAtoi(row->cells[columns->npu], &index) || index < 0) {
      if (absl::StripAsciiWhitespace(line).empty() &&
          line_number + 1 >= lines.size()) {
        break;  // the final newline
      }
      return absl::InvalidArgumentError(absl::StrCat(
          where, " of the device table is not a device row: \"",
          absl::CEscape(absl::StripAsciiWhitespace(line).substr(0, 120)),
          "\""));
    }
    absl::StatusOr<ProbedDevice> device = ReadRow(
        *row, index, *columns, absl::StrCat(where, " (NPU ", index, ")"));
    if (!device.ok()) return device.status();
    devices.push_back(*std::move(device));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "truncated table: the output ends after ", devices.size(),
      " device row(s) without the border that closes the device table"));
}

}  // namespace rbln
