#pragma once
// polystack's version: `--version`, and part of the key under which self-check results are kept.
namespace ps {
inline constexpr const char* kVersion = "0.1.0";
}
