// heaplab's static pages (the dashboard, report plots): a page of
// experiments/web/ with its style sheet, Chart.js, the chart helpers, the
// page's script and its data put in, so that it opens offline.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace heaplab::experiments {

enum class Page { dashboard, plots };

// The whole page with `data` in it. The data sits in a <script> element
// with no "<" at all in it, so nothing in a string (a path, an id) can end
// or reshape it.
std::string web_page(Page page, const nlohmann::json& data);

}  // namespace heaplab::experiments
