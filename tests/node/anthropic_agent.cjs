// An Anthropic TypeScript SDK agent: messages.stream, one tool, the SDK's own retries (529 included) and timeout.
// Prints one JSON line: the answer, or the error the SDK raised (its class name and message).
const Anthropic = require("@anthropic-ai/sdk");

const client = new Anthropic({
  baseURL: process.env.BASE,
  apiKey: "sk-ant-node-test",
  timeout: Number(process.env.TIMEOUT_MS || 20000),
  maxRetries: Number(process.env.RETRIES || 0),
});
const tools = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];

async function main() {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  for (let turn = 0; turn < 4; turn++) {
    const message = await client.messages.stream({ model: "claude-test", max_tokens: 256, messages, tools }).finalMessage();
    messages.push({ role: "assistant", content: message.content });
    const calls = message.content.filter((block) => block.type === "tool_use");
    if (calls.length === 0) {
      const answer = message.content.map((block) => block.text || "").join("");
      return { answer, turns: turn + 1, stop: message.stop_reason };
    }
    const results = calls.map((call) => ({ type: "tool_result", tool_use_id: call.id, content: `sunny in ${call.input.city}` }));
    messages.push({ role: "user", content: results });
  }
  return { answer: null };
}

main().then(
  (result) => console.log(JSON.stringify(result)),
  (error) => {
    console.log(JSON.stringify({ error: error.constructor.name, message: String(error.message) }));
    process.exitCode = 1;
  },
);
