#pragma once
// A chat reply read as it streams in, in the parts the OpenAI API gives apart: the model's
// thinking (reasoning_content), its answer (content) and its tool calls. Text that may begin a
// call is held back from the answer until the reply ends, when the calls are parsed; a reply
// whose calls do not parse comes back whole as content.
#include <string>
#include <vector>

#include "engine/thinking.h"
#include "engine/tool_calls.h"

namespace ps {

class ReplyReader {
 public:
  struct Options {
    bool split_reasoning = false;  // <think> blocks go to `reasoning`
    bool starts_thinking = false;  // the prompt opened a <think> block
    bool tools = false;            // the reply may call tools, in `format`
    ToolFormat format = ToolFormat::none;
  };
  struct Parts {
    std::string reasoning, content;
    std::vector<ToolCall> calls;  // only with the last piece
  };
  explicit ReplyReader(Options o) : o_(o), thinking_(o.starts_thinking) {}
  // The parts `piece` completes; `last`: the reply ends with it.
  Parts feed(const std::string& piece, bool last);

 private:
  void read_answer(const std::string& text, bool last, Parts& out);
  // gpt-oss's messages (harmony): <|channel|>NAME[ to=RECIPIENT][ <|constrain|>json]<|message|>
  // BODY<|end|>, the next led by <|start|>assistant. The analysis channel is the thinking,
  // final and commentary the answer, a message to functions.NAME a call.
  void read_harmony(const std::string& text, bool last, Parts& out);
  enum class Channel { header, thinking, answer, call, plain };
  Channel channel_ = Channel::header;
  std::string calls_;  // the call messages, as written, parsed when the reply ends
  Options o_;
  ThinkingSplitter thinking_;
  std::string pending_;        // answer text that may begin a call's mark
  std::string held_;           // the answer from a call's first mark on
  bool holding_ = false;       // a call may have begun: the rest waits for the end
  bool content_sent_ = false;  // answer text other than spaces went out
};

}  // namespace ps
