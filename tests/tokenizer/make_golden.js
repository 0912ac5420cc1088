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
  const file = path.join(here, "golden", model + ".json");
  fs.writeFileSync(file, "[\n" + out.map((x) => JSON.stringify(x)).join(",\n") + "\n]\n");
  console.log(`wrote ${file}: ${out.length} entries`);
}
