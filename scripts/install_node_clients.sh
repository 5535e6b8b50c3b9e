#!/bin/sh
# Installs the Node SDKs the suite drives against `chunktape serve` (openai-node and the Anthropic TypeScript SDK,
# pinned) into .node-clients/, where npm is there. It never fails: without npm the Node client tests skip and say
# why. NODE_CLIENTS names another folder (the tests use it).
DIR="${NODE_CLIENTS:-.node-clients}"
OPENAI=openai@6.49.0
ANTHROPIC=@anthropic-ai/sdk@1.17.0
if [ -f "$DIR/.installed-$OPENAI-$(echo $ANTHROPIC | tr / _)" ]; then exit 0; fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "node clients: npm or node is not installed here: the Node client tests skip"
    exit 0
fi
echo "node clients: installing $OPENAI and $ANTHROPIC into $DIR (npm)"
mkdir -p "$DIR"
if npm install --prefix "$DIR" --no-audit --no-fund --silent "$OPENAI" "$ANTHROPIC" >/dev/null 2>&1; then
    touch "$DIR/.installed-$OPENAI-$(echo $ANTHROPIC | tr / _)"
else
    echo "node clients: npm could not install them: the Node client tests skip"
fi
exit 0
