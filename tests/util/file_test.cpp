// openLinesForAppend: a log cut short mid-row (a full disk, a kill) is resumed on a line of its own.
#include "lockstep/util/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "lockstep/util/error.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string appendTo(const std::string& path, const std::string& text,
                     file::AppendedLines* opened = nullptr) {
  file::AppendedLines f = file::openLinesForAppend(path);
  if (opened) *opened = f;
  std::fputs(text.c_str(), f.file);
  std::fclose(f.file);
  return file::readAll(path);
}

}  // namespace

TEST(File, appending_lines_cuts_an_unfinished_last_line_first) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-lines-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "metrics.csv").string();
  file::AppendedLines f;
  EXPECT_EQ(appendTo(path, "h\n1,a\n", &f), "h\n1,a\n");
  EXPECT_TRUE(f.fresh);
  EXPECT_EQ(appendTo(path, "2,b\n3,", &f), "h\n1,a\n2,b\n3,");  // a writer cut short
  EXPECT_FALSE(f.fresh);
  EXPECT_EQ(f.dropped, 0);
  EXPECT_EQ(appendTo(path, "3,c\n", &f), "h\n1,a\n2,b\n3,c\n");
  EXPECT_EQ(f.dropped, 2);
  // Past one read-back block (4 KiB) without a newline, and a file that is one unfinished line.
  std::string long_row(10000, 'x');
  appendTo(path, long_row);
  EXPECT_EQ(appendTo(path, "4,d\n", &f), "h\n1,a\n2,b\n3,c\n4,d\n");
  EXPECT_EQ(f.dropped, 10000);
  const std::string lone = (dir / "lone.csv").string();
  appendTo(lone, "partial");
  EXPECT_EQ(appendTo(lone, "h\n", &f), "h\n");
  EXPECT_TRUE(f.fresh) << "all of it was the unfinished line: the header is written again";
  EXPECT_THROW(file::openLinesForAppend((dir / "no" / "such" / "x.csv").string()), IoError);
  fs::remove_all(dir);
}
