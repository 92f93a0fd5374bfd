// The serving process, composed once for `slipway serve` and `slipway llm serve`: the v2 Service
// on the http module's server, with /metrics and /health beside it, the management API and its
// OpenAPI document, and the OpenAI API under /v1, all behind one authorization.
#include <simdjson.h>

#include "slipway/serve.h"

namespace slipway::serve {
namespace {

http::Response to_http(HttpResponse response) {
  return http::Response{response.status, std::move(response.content_type), std::move(response.body),
                        std::move(response.headers)};
}

RequestHeaders headers_of(const http::Request& request) {
  RequestHeaders headers;
  headers.authorization = request.header("Authorization");
  headers.inference_header_length = request.header("Inference-Header-Content-Length");
  headers.inference_header_length_repeated = request.header_count("Inference-Header-Content-Length") > 1;
  headers.body_padding = request.body_padding;
  headers.route_key = request.header("X-Slipway-Route-Key");
  if (request.target.starts_with("/api/")) {
    // Only the management API reads it: inference requests do not pay for the lookup.
    headers.idempotency_key = request.header("Idempotency-Key");
    headers.idempotency_key_repeated = request.header_count("Idempotency-Key") > 1;
  }
  return headers;
}

// Whether a request may pass: nullopt, or the refusal to answer (a missing or unknown token: 401
// with its WWW-Authenticate header; a role too low: 403).
using AccessCheck = std::function<std::optional<HttpResponse>(const http::Request&)>;

// The OpenAI API at /v1: `check` first, its refusal and every refusal before the handler (a body
// over the limit, a full backlog) in OpenAI's error shape, so OpenAI's clients read them as
// theirs; POSTs on the workers (tokenizing a long prompt takes milliseconds).
http::Route openai_route(std::shared_ptr<OpenAiApi> api, AccessCheck check) {
  return http::Route{
      "/v1",
      [](const http::Request& request) {
        return request.method == "POST" ? http::Execution::kWorker : http::Execution::kEventLoop;
      },
      [api = std::move(api), check = std::move(check)](const http::Request& request, const http::Respond& respond) {
        if (auto refused = check(request)) {
          // In OpenAI's error shape, keeping the status and headers (WWW-Authenticate).
          simdjson::dom::parser parser;
          std::string_view message = "the request was refused";
          if (parser.parse(refused->body)["error"].get(message) != simdjson::SUCCESS) {
            message = "the request was refused";
          }
          http::Response answer = OpenAiApi::error(refused->status, message);
          answer.headers = std::move(refused->headers);
          return respond(std::move(answer));
        }
        api->handle(request, respond);
      },
      [](int status, std::string_view message) { return OpenAiApi::error(status, message); }};
}

}  // namespace

struct Server::State {
  State(registry::Registry& registry, const ServerOptions& options) : service(registry, options.service) {}

  Service service;
  std::shared_ptr<OpenAiApi> llms;  // serves no model when no LLM is registered
  // Declared after the service: destroyed first, so no request reaches a destroyed service.
  std::unique_ptr<http::Server> http;
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() {
  // Anything still queued is answered (503) while the connections can still be written, and
  // before the HTTP server goes: a queued request holds its connection's session.
  state_->service.stop_batching();
  state_->service.stop_deadlines();
  if (state_->llms) state_->llms->shutdown();
  state_->http.reset();
}

Result<std::unique_ptr<Server>> Server::start(registry::Registry& registry, const ServerOptions& options) {
  auto state = std::make_unique<State>(registry, options);
  Service& service = state->service;
  auto handle = [&service](const http::Request& request, const http::Respond& respond) {
    service.handle_async(request.method, request.target, request.body, headers_of(request),
                         [respond](HttpResponse response) { respond(to_http(std::move(response))); });
  };
  std::vector<http::Route> routes;
  routes.push_back(http::Route{"/v2",
                               [](const http::Request& request) {
                                 return Service::needs_worker(request.path) ? http::Execution::kWorker
                                                                            : http::Execution::kEventLoop;
                               },
                               handle});
  routes.push_back(http::Route{"/metrics", nullptr, handle});
  routes.push_back(http::Route{"/health", nullptr, handle});
  routes.push_back(http::Route{"/api", [](const http::Request&) { return http::Execution::kWorker; }, handle});
  routes.push_back(http::Route{"/openapi.json", [](const http::Request&) { return http::Execution::kWorker; }, handle});
  // /v1 answers whether or not an LLM is registered (an empty model list, then "no such model"),
  // as the OpenAPI document says.
  std::vector<ServedLlm> llms = load_registered_llms(registry, options.llm);
  llms.insert(llms.end(), options.llms.begin(), options.llms.end());
  bool serves_llms = !llms.empty();
  state->llms = std::make_shared<OpenAiApi>(std::move(llms));
  if (serves_llms) {
    service.set_llms([api = state->llms] { return api->metrics_text(); },
                     [api = state->llms] {
                       std::set<std::string> names;
                       for (const auto& served : api->models()) names.insert(served.id);
                       return names;
                     });
  }
  // The OpenAI API takes the predict role, as inference does.
  routes.push_back(openai_route(state->llms, [&service](const http::Request& request) {
    return service.check_access(request.target, request.header("Authorization"));
  }));

  http::ServerOptions transport = options.http;
  // Queued batch requests are answered 503 while the event loop that writes them still runs.
  transport.on_drain_deadline = [&service, llms = state->llms] {
    service.stop_batching();
    if (llms) llms->cancel_all("the server is shutting down");
  };
  transport.on_hangup = nullptr;
  if (options.on_hangup) {
    transport.on_hangup = [&service, on_hangup = options.on_hangup] { on_hangup(service); };
  }
  transport.on_refusal = [&service](const http::Request& request, http::Refusal refusal) {
    service.record_refusal(request.target, refusal);
  };
  SLIPWAY_ASSIGN_OR_RETURN(state->http, http::Server::start(std::move(routes), transport));
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

std::uint16_t Server::port() const { return state_->http->port(); }

http::ServerStats Server::http_stats() const { return state_->http->stats(); }

Service& Server::service() { return state_->service; }

void Server::run() { state_->http->run(); }

void Server::stop() { state_->http->stop(); }

}  // namespace slipway::serve
