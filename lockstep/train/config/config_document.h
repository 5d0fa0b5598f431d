#pragma once
// The config file as a document, before its keys are read (config.cpp): syntax, duplicate keys,
// its JSON form (a checkpoint's config.json) and the hash that tells runs apart (run_identity.h).
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>

namespace lockstep::train {

/// Parses YAML or JSON text. A source named *.json is first held to JSON's grammar. Syntax errors
/// are ValueErrors "SOURCE: line L, column C: JSON|YAML syntax error: ...".
YAML::Node loadConfigDocument(const std::string& text, const std::string& source);

/// ValueError naming both lines when a mapping gives a key twice, and naming the line when a key
/// is not a plain name (a list or a mapping). Also a ValueError when the document nests deeper
/// than 64 levels or holds more than 100000 values (YAML aliases can make either happen).
void checkNoDuplicateKeys(const YAML::Node& n, const std::string& path, const std::string& source);

/// The document as JSON: plain scalars typed (bool, integer, finite real, else string), quoted
/// scalars strings. Bounded as checkNoDuplicateKeys (`source` names the file in the error).
nlohmann::json configDocumentToJson(const YAML::Node& n, const std::string& source);

/// TrainConfig::identity_hash of a document (config.h says which keys it leaves out).
std::string configIdentityHash(nlohmann::json document);

}  // namespace lockstep::train
