#include "chief/export_formats/zip_writer.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psrt {
namespace {

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}

void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xffff);
  Put16(out, v >> 16);
}

constexpr uint32_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();

// The fields a local header and a central directory entry share, from
// "version needed" to the name length (APPNOTE 4.3.7 / 4.3.12).
void PutCommon(std::string* out, uint32_t crc, uint32_t size, size_t name_size) {
  Put16(out, 20);        // version needed to extract: 2.0
  Put16(out, 1 << 11);   // flags: names are UTF-8
  Put16(out, 0);         // method: stored
  Put16(out, 0);         // time 00:00
  Put16(out, kDosDate);  // date
  Put32(out, crc);
  Put32(out, size);      // compressed size
  Put32(out, size);      // uncompressed size
  Put16(out, static_cast<uint32_t>(name_size));
  Put16(out, 0);         // extra field length
}

absl::Status CheckName(const std::string& name, std::set<std::string>* seen) {
  bool bad = name.empty() || name.size() > 0xffff || name[0] == '/' || absl::StrContains(name, '\\') ||
             absl::StrContains(name, '\0');
  for (absl::string_view part : absl::StrSplit(name, '/')) bad = bad || part == "..";
  if (bad) return absl::InvalidArgumentError(absl::StrCat("zip: bad entry name \"", name, "\""));
  if (!seen->insert(name).second) return absl::InvalidArgumentError(absl::StrCat("zip: entry ", name, " twice"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> StoredZip(const std::vector<std::pair<std::string, std::string>>& entries) {
  if (entries.size() > 0xffff) return absl::ResourceExhaustedError("zip: more than 65535 entries need ZIP64");
  std::set<std::string> seen;
  std::string out, directory;
  for (const auto& [name, contents] : entries) {
    if (auto s = CheckName(name, &seen); !s.ok()) return s;
    if (contents.size() >= kMax32 || out.size() + 30 + name.size() + contents.size() >= kMax32) {
      return absl::ResourceExhaustedError(absl::StrCat("zip: entry ", name, " (", contents.size(),
                                                       " bytes) would need ZIP64, which is not written"));
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    // zlib's crc32 takes a uInt length: feed it in pieces.
    for (size_t done = 0; done < contents.size();) {
      uInt n = static_cast<uInt>(std::min<size_t>(contents.size() - done, 1u << 30));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(contents.data() + done), n);
      done += n;
    }
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint32_t size = static_cast<uint32_t>(contents.size());
    Put32(&out, 0x04034b50);  // local file header
    PutCommon(&out, static_cast<uint32_t>(crc), size, name.size());
    out += name;
    out += contents;

    Put32(&directory, 0x02014b50);  // central directory file header
    Put16(&directory, (3 << 8) | 20);  // made by: Unix, 2.0
    PutCommon(&directory, static_cast<uint32_t>(crc), size, name.size());
    Put16(&directory, 0);  // comment length
    Put16(&directory, 0);  // disk number
    Put16(&directory, 0);  // internal attributes
    Put32(&directory, 0100644u << 16);  // external attributes: a regular file, rw-r--r--
    Put32(&directory, offset);
    directory += name;
  }
  if (out.size() + directory.size() >= kMax32) return absl::ResourceExhaustedError("zip: archive over 4 GiB needs ZIP64");
  const uint32_t directory_offset = static_cast<uint32_t>(out.size());
  out += directory;
  Put32(&out, 0x06054b50);  // end of central directory
  Put16(&out, 0);           // this disk
  Put16(&out, 0);           // disk with the directory
  Put16(&out, static_cast<uint32_t>(entries.size()));
  Put16(&out, static_cast<uint32_t>(entries.size()));
  Put32(&out, static_cast<uint32_t>(directory.size()));
  Put32(&out, directory_offset);
  Put16(&out, 0);  // comment length
  return out;
}

}  // namespace psrt
