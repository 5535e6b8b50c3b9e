// An openai-node agent as its users write one: the stream helper, one tool, the SDK's own retries and timeout.
// Prints one JSON line: the answer, or the error the SDK raised (its class name and message).
const OpenAI = require("openai");

const client = new OpenAI({
  baseURL: process.env.BASE,
  apiKey: "sk-node-test",
  timeout: Number(process.env.TIMEOUT_MS || 20000),
  maxRetries: Number(process.env.RETRIES || 0),
});
const tools = [
  {
    type: "function",
    function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
  },
];

async function main() {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  for (let turn = 0; turn < 4; turn++) {
    const stream = client.chat.completions.stream({ model: "m", messages, tools });
    const message = (await stream.finalChatCompletion()).choices[0].message;
    messages.push(message);
    if (!message.tool_calls || message.tool_calls.length === 0) return { answer: message.content, turns: turn + 1 };
    for (const call of message.tool_calls) {
      const { city } = JSON.parse(call.function.arguments);
      messages.push({ role: "tool", tool_call_id: call.id, content: `sunny in ${city}` });
    }
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
