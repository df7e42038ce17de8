#include "services/openai/http_exchange.h"

namespace specline::openai {

std::string HttpExchange::path() const {
  const std::string target(request().target().data(), request().target().size());
  return target.substr(0, target.find('?'));
}

std::string HttpExchange::header(http::field field) const {
  const auto value = request()[field];
  return std::string(value.data(), value.size());
}

std::string HttpExchange::header(std::string_view name) const {
  const auto value = request()[boost::beast::string_view(name.data(), name.size())];
  return std::string(value.data(), value.size());
}

}  // namespace specline::openai
