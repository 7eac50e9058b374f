// Resident memory of this process, for progress lines, benchmarks and memory-growth tests.
#pragma once

namespace sf {

// Current resident set size in MiB (from /proc/self/statm).
double current_rss_mb();
// Peak resident set size in MiB since the process started (getrusage).
double peak_rss_mb();

}  // namespace sf
