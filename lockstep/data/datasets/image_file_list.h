#pragma once
// The (image file, class) lists of an image dataset: torchvision's ImageFolder scan of class
// folders, or a flat list file. Pure file-system reads; reentrant.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

/// torchvision's IMG_EXTENSIONS: the files an ImageFolder scan takes (compared case-insensitively).
inline const std::vector<std::string> kImageExtensions = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                          ".pgm", ".tif",  ".tiff", ".webp"};

/// Whether path ends with one of kImageExtensions, ignoring case (torchvision's
/// has_file_allowed_extension).
bool hasImageExtension(const std::string& path);

struct ImageFileList {
  /// Class i's name (the class folder's); empty for a list file, whose labels are bare numbers.
  std::vector<std::string> classes;
  /// Every sample's file path and class index, in torchvision's order.
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  /// classes.size(), or for a list file the largest label + 1.
  int64_t num_classes = 0;
};

/// torchvision's ImageFolder(dir) file list: the classes are dir's subfolders (symbolic links to
/// folders included, hidden ones too) sorted by name, class i = the i-th; a class's samples are the
/// files with an image extension anywhere below its folder (links followed), walked in sorted
/// directory order and sorted by name within a directory. Other files are left out. IoError
/// naming dir when it is not a directory or has no class folder, and, as torchvision's
/// FileNotFoundError, naming every class folder without an image file.
ImageFileList scanImageFolder(const std::string& dir);

/// A flat list of samples: lines "PATH LABEL" (whitespace-separated, the label last, as ImageNet's
/// train.txt), or for a `.csv` file "PATH,LABEL" with an optional header line. Relative paths are
/// taken from base_dir; blank lines and lines starting with # are skipped. IoError naming the file
/// and line for a malformed line or a negative label.
ImageFileList readImageList(const std::string& list_file, const std::string& base_dir);

}  // namespace lockstep::data
