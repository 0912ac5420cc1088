// Writes tests/tokenizer/golden/<model>.json: for every corpus entry, the ids that @lenml/tokenizers
// (a JavaScript port of transformers.js, independent of our C++) produces, and its decoding of them.
// Run through make_golden.sh, which installs the pinned package into a temporary folder.
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const here = __dirname;
const corpus = JSON.parse(fs.readFileSync(path.join(here, "corpus.json"), "utf8"));
fs.mkdirSync(path.join(here, "golden"), { recursive: true });
for (const model of ["llama3_1", "qwen3", "llama2"]) {
  const dir = path.join(here, "models", model);
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  const out = corpus.map((e) => {
    // Bytes that are not UTF-8 are read as a UTF-8 decoder reads them (U+FFFD per maximal subpart).
    const text = e.text !== undefined ? e.text : Buffer.from(e.hex, "hex").toString("utf8");
    const ids = tokenizer.encode(text);
    const decoded = tokenizer.decode(ids, { clean_up_tokenization_spaces: false });
    return { ids, decoded };
  });
  // Chat prompts, rendered by the reference's Jinja engine from the model's own chat_template.
  if (model !== "llama2") {
    const chats = [];
    for (const [system, user] of [[null, "Write a haiku about GPUs"], ["You are terse.", "  Hi there!\n"],
                                  ["Système: réponds en français.", "日本語で答えて 🎉"]]) {
      const messages = system === null ? [] : [{ role: "system", content: system }];
      messages.push({ role: "user", content: user });
      let text;
      try {
        text = tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
      } catch (e) {
        // The reference's Jinja engine cannot parse Qwen3's template; test_tokenizer.cpp spells it out.
        console.log(`${model}: no chat golden (${e.message})`);
        break;
      }
      chats.push({ system, user, text, ids: tokenizer.encode(text, { add_special_tokens: false }) });
    }
    if (chats.length) fs.writeFileSync(path.join(here, "golden", model + "-chat.json"), JSON.stringify(chats, null, 1) + "\n");
    // Conversations of several turns (user, assistant, user, ...), with the generation prompt.
    const conversations = [];
    for (const [system, turns] of [[null, ["Hi", "Hello! How can I help?", "Write a haiku about GPUs"]],
                                   ["You are terse.", ["  Hi there!\n", "Hi.", " And now? ", "Now what?", "日本語で 🎉"]]]) {
      const messages = system === null ? [] : [{ role: "system", content: system }];
      turns.forEach((content, i) => messages.push({ role: i % 2 ? "assistant" : "user", content }));
      let text;
      try {
        text = tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
      } catch (e) {
        break;
      }
      conversations.push({ system, turns, text, ids: tokenizer.encode(text, { add_special_tokens: false }) });
    }
    if (conversations.length)
      fs.writeFileSync(path.join(here, "golden", model + "-chat-turns.json"), JSON.stringify(conversations, null, 1) + "\n");
  }
  const file = path.join(here, "golden", model + ".json");
  fs.writeFileSync(file, "[\n" + out.map((x) => JSON.stringify(x)).join(",\n") + "\n]\n");
  console.log(`wrote ${file}: ${out.length} entries`);
}
