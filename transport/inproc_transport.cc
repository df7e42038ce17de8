#include "transport/inproc_transport.h"

#include <map>
#include <mutex>

#include "transport/message_queue.h"

namespace specline::transport {
namespace {

// name -> inbox. Weak, so a dropped receiver frees its name even if it was
// never shut down explicitly.
struct Registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<MessageQueue>> inboxes;

  std::shared_ptr<MessageQueue> Find(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = inboxes.find(name);
    if (it == inboxes.end()) return nullptr;
    std::shared_ptr<MessageQueue> q = it->second.lock();
    return q && !q->closed() ? q : nullptr;
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: used from static dtors
  return *r;
}

class InprocReceiver : public ActivationReceiver {
 public:
  InprocReceiver(std::string name, std::shared_ptr<MessageQueue> queue)
      : name_(std::move(name)), address_("inproc://" + name_), queue_(std::move(queue)) {}
  ~InprocReceiver() override { Shutdown(); }

  absl::StatusOr<std::string> Receive(std::chrono::milliseconds timeout) override {
    return queue_->Pop(timeout);
  }
  void Shutdown() override {
    queue_->Close();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.inboxes.find(name_);
    if (it != r.inboxes.end() && it->second.lock() == queue_) r.inboxes.erase(it);
  }
  const std::string& address() const override { return address_; }
  size_t pending() const override { return queue_->size(); }

 private:
  std::string name_, address_;
  std::shared_ptr<MessageQueue> queue_;
};

class InprocSender : public ActivationSender {
 public:
  explicit InprocSender(std::string name) : name_(std::move(name)), address_("inproc://" + name_) {}

  absl::Status Send(std::string_view message) override {
    std::shared_ptr<MessageQueue> q = registry().Find(name_);
    if (!q || !q->Push(std::string(message))) {
      return absl::UnavailableError("no receiver is listening at " + address_);
    }
    return absl::OkStatus();
  }
  const std::string& address() const override { return address_; }

 private:
  std::string name_, address_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationReceiver>> ListenInproc(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& slot = r.inboxes[name];
  if (std::shared_ptr<MessageQueue> live = slot.lock(); live && !live->closed()) {
    return absl::AlreadyExistsError("inproc://" + name + " already has a receiver");
  }
  auto queue = std::make_shared<MessageQueue>();
  slot = queue;
  return std::make_unique<InprocReceiver>(name, std::move(queue));
}

std::unique_ptr<ActivationSender> ConnectInproc(const std::string& name) {
  return std::make_unique<InprocSender>(name);
}

}  // namespace specline::transport
