#include "experiments/web_page.h"

#include <stdexcept>

#include "generated/web_assets.h"

namespace heaplab::experiments {
namespace {

// Replaces the placeholder /*@NAME@*/ of `page` with `text`.
void fill(std::string& page, const std::string& name, std::string_view text) {
  const std::string mark = "/*@" + name + "@*/";
  const size_t at = page.find(mark);
  if (at == std::string::npos) throw std::logic_error("web page without " + mark);
  page.replace(at, mark.size(), text);
}

}  // namespace

std::string web_page(Page page, const nlohmann::json& data) {
  const std::string raw = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string text;
  text.reserve(raw.size());
  for (char ch : raw)
    if (ch == '<')
      text += "\\u003c";
    else
      text += ch;
  std::string html(page == Page::dashboard ? web::dashboard_html() : web::plots_html());
  fill(html, "STYLE", web::dashboard_css());
  fill(html, "CHARTJS", web::chart_js());
  fill(html, "HELPERS", web::charts_js());
  fill(html, "SCRIPT", page == Page::dashboard ? web::dashboard_js() : web::plots_js());
  fill(html, "DATA", text);  // last: the data may hold anything
  return html;
}

}  // namespace heaplab::experiments
