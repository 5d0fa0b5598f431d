#include "lockstep/data/datasets/image_file_list.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "lockstep/util/error.h"

namespace lockstep::data {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string extensionList() {
  std::string s;
  for (const auto& e : kImageExtensions) s += (s.empty() ? "" : ", ") + e;
  return s;
}

// The image files below class_dir in os.walk(followlinks=True) order as sorted() sorts its
// (root, dirs, files) tuples: directories by path, files by name within each. A directory reached
// twice through links is listed twice, as os.walk lists it; a link back to a directory on its own
// path (a cycle, where os.walk would descend until the path is too long) ends the walk there.
void walkClass(const fs::path& class_dir, std::vector<std::string>& out) {
  std::vector<std::pair<std::string, std::vector<std::string>>> dirs;  // (path, image file names)
  // (directory, the canonical paths of it and its ancestors)
  std::vector<std::pair<fs::path, std::vector<fs::path>>> stack = {{class_dir, {}}};
  while (!stack.empty()) {
    auto [dir, chain] = std::move(stack.back());
    stack.pop_back();
    std::error_code ec;
    const fs::path canonical = fs::canonical(dir, ec);
    if (ec || std::find(chain.begin(), chain.end(), canonical) != chain.end()) continue;
    chain.push_back(canonical);
    std::vector<std::string> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code kind_ec;
      if (it->is_directory(kind_ec)) {  // follows links, as os.walk(followlinks=True)
        stack.emplace_back(it->path(), chain);
      } else if (hasImageExtension(it->path().filename().string())) {
        files.push_back(it->path().filename().string());
      }
    }
    std::sort(files.begin(), files.end());
    dirs.emplace_back(dir.string(), std::move(files));
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [dir, files] : dirs)
    for (const auto& f : files) out.push_back(dir + "/" + f);
}

}  // namespace

bool hasImageExtension(const std::string& path) {
  const std::string l = lower(path);
  return std::any_of(kImageExtensions.begin(), kImageExtensions.end(),
                     [&](const std::string& e) { return l.size() >= e.size() && l.ends_with(e); });
}

ImageFileList scanImageFolder(const std::string& dir) {
  std::error_code ec;
  LOCKSTEP_ENFORCE(fs::is_directory(dir, ec), IoError, dir,
                   ": not a directory (an image folder holds one subfolder per class)");
  ImageFileList list;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code kind_ec;
    if (it->is_directory(kind_ec)) list.classes.push_back(it->path().filename().string());
  }
  LOCKSTEP_ENFORCE(!ec, IoError, dir, ": cannot list the directory: ", ec.message());
  LOCKSTEP_ENFORCE(!list.classes.empty(), IoError, dir,
                   ": couldn't find any class folder (an image folder holds one subfolder per class)");
  std::sort(list.classes.begin(), list.classes.end());
  std::vector<std::string> empty;
  for (size_t c = 0; c < list.classes.size(); ++c) {
    const size_t before = list.paths.size();
    walkClass(fs::path(dir) / list.classes[c], list.paths);
    if (list.paths.size() == before) empty.push_back(list.classes[c]);
    list.labels.resize(list.paths.size(), static_cast<int64_t>(c));
  }
  if (!empty.empty()) {
    std::string names;
    for (const auto& e : empty) names += (names.empty() ? "" : ", ") + e;
    throw IoError(dir + ": found no valid file for the classes " + names +
                  ". Supported extensions are: " + extensionList() + " (add images or remove the folders)");
  }
  list.num_classes = static_cast<int64_t>(list.classes.size());
  return list;
}

ImageFileList readImageList(const std::string& list_file, const std::string& base_dir) {
  std::ifstream in(list_file);
  LOCKSTEP_ENFORCE(in, IoError, list_file, ": cannot open the image list");
  const bool csv = lower(list_file).ends_with(".csv");
  ImageFileList list;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t last = line.find_last_not_of(" \t");
    line = line.substr(first, last - first + 1);
    const size_t sep = csv ? line.rfind(',') : line.find_last_of(" \t");
    std::string path = sep == std::string::npos ? "" : line.substr(0, sep);
    const std::string label = sep == std::string::npos ? "" : line.substr(sep + 1);
    if (csv && list.paths.empty() && number == 1 && lower(label) == "label") continue;  // header
    if (!csv) path = path.substr(0, path.find_last_not_of(" \t") + 1);
    int64_t value = -1;
    size_t used = 0;
    try {
      value = std::stoll(label, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (path.empty() || used == 0 || used != label.size() || value < 0 || value >= (int64_t{1} << 31)) {
      throw IoError(list_file + ":" + std::to_string(number) + ": expected \"PATH" + (csv ? "," : " ") +
                    "LABEL\" with a class index in 0 .. 2^31 - 1, got \"" + line + "\"");
    }
    list.paths.push_back(fs::path(path).is_absolute() ? path : (fs::path(base_dir) / path).string());
    list.labels.push_back(value);
    list.num_classes = std::max(list.num_classes, value + 1);
  }
  LOCKSTEP_ENFORCE(!list.paths.empty(), IoError, list_file, ": the image list has no samples");
  return list;
}

}  // namespace lockstep::data
