// Tests of the web pages heaplab writes: every placeholder filled, Chart.js
// and the page scripts inline (nothing fetched at view time), and data that
// cannot end its <script> element whatever its strings hold.
#include "experiments/web_page.h"

#include <gtest/gtest.h>

#include <string>

namespace heaplab::experiments {
namespace {

TEST(WebPage, EveryPartInlineAndNoPlaceholderLeft) {
  for (const Page p : {Page::dashboard, Page::plots}) {
    const std::string page = web_page(p, nlohmann::json{{"traces", nlohmann::json::array()}});
    EXPECT_EQ(page.find("/*@"), std::string::npos);
    EXPECT_NE(page.find("Chart.js v3"), std::string::npos);
    EXPECT_NE(page.find("function markPainted()"), std::string::npos);  // charts.js
    EXPECT_NE(page.find("function render()"), std::string::npos);
    EXPECT_EQ(page.find("src="), std::string::npos);  // no script or image fetched
    EXPECT_EQ(page.find("<link"), std::string::npos);
  }
}

TEST(WebPage, DataCannotEndItsScriptElement) {
  const std::string page = web_page(Page::plots, nlohmann::json{{"title", "</script><script>alert(1)</script><!--"}});
  const size_t at = page.find("<script id=\"data\" type=\"application/json\">");
  ASSERT_NE(at, std::string::npos);
  const size_t end = page.find("</script>", at);
  const std::string data = page.substr(at, end - at);
  EXPECT_EQ(data.find("alert"), data.rfind("alert"));
  EXPECT_NE(data.find("\\u003c/script>\\u003cscript>alert(1)\\u003c/script>\\u003c!--"), std::string::npos) << data;
  EXPECT_EQ(nlohmann::json::parse(data.substr(data.find('>') + 1))["title"], "</script><script>alert(1)</script><!--");
}

}  // namespace
}  // namespace heaplab::experiments
