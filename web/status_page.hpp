#pragma once

#include <string_view>

namespace rekindle::web {

/// The supervisor daemon's status page: one self-contained HTML document (no external script, style
/// or font: cluster machines often have no internet) that reads /api/status and /api/events every
/// second with the token it was opened with (?token=) and draws the job, nodes, ranks, the loss
/// curve, the recoveries with their phases, checkpoints and the event log.
[[nodiscard]] std::string_view status_page_html() noexcept;

}  // namespace rekindle::web
