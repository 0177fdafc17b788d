#!/bin/sh
# Claude Code statusline command (configured by the entrypoint in ~/.claude/settings.json).
# Claude Code runs it with a JSON object on stdin (session, model, workspace, cost, ...). It is saved,
# atomically, to ~/.agentbox/statusline.json (the latest of any tab) and, inside tmux, to
# ~/.agentbox/statusline/<pane>.json (one per tab), for the controller to read through pod exec.
# Stdout is the statusline Claude Code shows.
set -u
dir="$HOME/.agentbox"
mkdir -p "$dir/statusline"
tmp="$dir/.statusline.$$"
cat > "$tmp"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if command -v jq >/dev/null 2>&1 && jq -e . "$tmp" >/dev/null 2>&1; then
  jq -c --arg savedAt "$now" --arg pane "${TMUX_PANE:-}" '. + {agentbox: {savedAt: $savedAt, pane: $pane}}' \
    "$tmp" > "$tmp.j" && mv "$tmp.j" "$tmp"
  line=$(jq -r '"\(.model.display_name // "claude") · \(.workspace.current_dir // "" | split("/") | last)"' "$tmp")
else
  rm -f "$tmp"      # not JSON: keep the last good file
  echo "claude"
  exit 0
fi
chmod 600 "$tmp"
if [ -n "${TMUX_PANE:-}" ]; then
  cp "$tmp" "$dir/statusline/pane-${TMUX_PANE#%}.json.tmp" && mv "$dir/statusline/pane-${TMUX_PANE#%}.json.tmp" \
    "$dir/statusline/pane-${TMUX_PANE#%}.json"
fi
mv "$tmp" "$dir/statusline.json"
printf '%s\n' "$line"
