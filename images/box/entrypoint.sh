#!/bin/sh
# Entrypoint of the example box image.
#  1. Copies the box credentials Secret (mounted read-only by the controller at
#     /var/run/agentbox/credentials) into the agents' own login files, mode 0600.
#  2. Points Claude Code's statusline at agentbox-statusline, which saves the statusline JSON to
#     ~/.agentbox/statusline.json for the controller to read.
#  3. Starts the tmux session `agentbox` with one tab (window) running the agent, then stays up.
# Environment: AGENTBOX_AGENT (set by the controller: claude-code | codex | ... | shell),
#   AGENTBOX_COMMAND (override the tab's command), AGENTBOX_TABS (extra tab names, space-separated;
#   each starts a shell), AGENTBOX_CODEX_APPROVAL_POLICY / AGENTBOX_CODEX_SANDBOX_MODE /
#   AGENTBOX_CLAUDE_PERMISSION_MODE (the agents' permission modes, written into their settings).
set -eu

CREDS=${AGENTBOX_CREDENTIALS_DIR:-/var/run/agentbox/credentials}
umask 077

install_login() {  # install_login <mounted file> <destination>
  if [ -s "$1" ]; then
    mkdir -p "$(dirname "$2")"
    cp "$1" "$2.tmp" && chmod 600 "$2.tmp" && mv "$2.tmp" "$2"
  fi
}
install_login "$CREDS/credentials.json" "$HOME/.claude/.credentials.json"
install_login "$CREDS/auth.json" "$HOME/.codex/auth.json"

# Claude Code settings: add the statusline command, keep whatever else is there.
mkdir -p "$HOME/.claude" "$HOME/.agentbox"
settings="$HOME/.claude/settings.json"
[ -s "$settings" ] || echo '{}' > "$settings"
jq '.statusLine = {"type": "command", "command": "/usr/local/bin/agentbox-statusline", "padding": 0}' \
  "$settings" > "$settings.tmp" && mv "$settings.tmp" "$settings"

# First run without prompts: Claude Code's onboarding and the work directory's trust dialog; Codex's
# update check and the model nudge that would follow a limit line (the controller expects the line).
workdir=$(pwd)
if [ ! -s "$HOME/.claude.json" ]; then
  jq -n --arg cwd "$workdir" '{hasCompletedOnboarding: true, theme: "dark",
    projects: {($cwd): {hasTrustDialogAccepted: true, hasCompletedProjectOnboarding: true}}}' > "$HOME/.claude.json"
fi
mkdir -p "$HOME/.codex"
if [ ! -s "$HOME/.codex/config.toml" ]; then
  cat > "$HOME/.codex/config.toml" <<TOML
check_for_update_on_startup = false

[notice]
hide_rate_limit_model_nudge = true

[projects."$workdir"]
trust_level = "trusted"
TOML
fi

# Permission / approval modes for unattended work (docs/configuration.md#unattended-boxes-permission-and-approval-modes),
# written into the agents' own settings at every start so they also hold after the controller restarts
# Codex with `codex resume --last` (which carries no flags). Unset: the files are left as they are.
toml_top() {  # toml_top <file> <key> <value>: set a top-level string key of a TOML file (before any [table])
  if grep -q "^$2 = " "$1"; then
    sed "s|^$2 = .*|$2 = \"$3\"|" "$1" > "$1.tmp"
  else
    { printf '%s = "%s"\n' "$2" "$3"; cat "$1"; } > "$1.tmp"
  fi
  mv "$1.tmp" "$1"
}
case "${AGENTBOX_CODEX_APPROVAL_POLICY:-}" in
  "") ;;
  untrusted|on-failure|on-request|never) toml_top "$HOME/.codex/config.toml" approval_policy "$AGENTBOX_CODEX_APPROVAL_POLICY" ;;
  *) echo "agentbox: AGENTBOX_CODEX_APPROVAL_POLICY must be untrusted, on-failure, on-request or never" >&2; exit 2 ;;
esac
case "${AGENTBOX_CODEX_SANDBOX_MODE:-}" in
  "") ;;
  read-only|workspace-write|danger-full-access) toml_top "$HOME/.codex/config.toml" sandbox_mode "$AGENTBOX_CODEX_SANDBOX_MODE" ;;
  *) echo "agentbox: AGENTBOX_CODEX_SANDBOX_MODE must be read-only, workspace-write or danger-full-access" >&2; exit 2 ;;
esac
case "${AGENTBOX_CLAUDE_PERMISSION_MODE:-}" in
  "") ;;
  default|acceptEdits|plan|bypassPermissions)
    jq --arg m "$AGENTBOX_CLAUDE_PERMISSION_MODE" '.permissions.defaultMode = $m' "$settings" > "$settings.tmp" \
      && mv "$settings.tmp" "$settings" ;;
  *) echo "agentbox: AGENTBOX_CLAUDE_PERMISSION_MODE must be default, acceptEdits, plan or bypassPermissions" >&2; exit 2 ;;
esac

# tmux: long scrollback (the controller reads the live bottom; humans scroll), no auto-renamed windows
# (the controller addresses tabs by name).
cat > "$HOME/.tmux.conf" <<'CONF'
set -g history-limit 50000
set -g allow-rename off
set -g automatic-rename off
set -g default-terminal "tmux-256color"
CONF

case "${AGENTBOX_AGENT:-shell}" in
  claude-code) default_cmd="claude" ;;
  codex)       default_cmd="codex" ;;
  *)           default_cmd="" ;;
esac
cmd="${AGENTBOX_COMMAND:-$default_cmd}"

umask 022
if ! tmux has-session -t agentbox 2>/dev/null; then
  tmux new-session -d -s agentbox -n main -x 200 -y 50
  # Typed at the shell, so the agent can be restarted in the same tab (`codex resume --last`).
  [ -n "$cmd" ] && tmux send-keys -t '=agentbox:main' "$cmd" Enter
  for tab in ${AGENTBOX_TABS:-}; do
    tmux new-window -d -t '=agentbox' -n "$tab"
  done
fi

echo "agentbox: tmux session 'agentbox' started (attach: kubectl exec -it <pod> -- tmux attach -t agentbox)"
# Stay up while the pod lives; a closed session is not a reason to restart the pod (and lose work).
exec sleep infinity
