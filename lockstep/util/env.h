#pragma once
// Typed access to environment variables. A variable that is set but malformed is an error that
// names it, never a silent default.
#include <cstdint>
#include <optional>
#include <string>

namespace lockstep::env {

/// The variable's value, or nullopt when unset (an empty value counts as set).
std::optional<std::string> get(const char* name);
/// The variable parsed as a base-10 integer; nullopt when unset; ValueError when malformed.
std::optional<int64_t> getInt(const char* name);
/// getInt, falling back to def when unset.
int64_t getInt(const char* name, int64_t def);
/// "1/true/yes/on" or "0/false/no/off" (case-insensitive); ValueError otherwise.
bool getBool(const char* name, bool def);
/// `value` (of variable `name`) as getBool reads it; ValueError naming both when malformed.
bool parseBool(const char* name, const std::string& value);
/// A size in bytes: a number (fractions allowed before a unit) with an optional unit, B, K/KiB,
/// M/MiB, G/GiB, T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), any case, spaces
/// allowed before it: "8GiB", "1.5G", "4096", "500 MB". ValueError naming `name` when malformed
/// or not a whole number of bytes in range.
int64_t parseBytes(const char* name, const std::string& value);
/// The variable read by parseBytes; nullopt when unset.
std::optional<int64_t> getBytes(const char* name);

}  // namespace lockstep::env
