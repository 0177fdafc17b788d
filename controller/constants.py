"""Names shared by every layer: API group, plurals, labels, condition types and reasons.

Imports nothing from the package (a leaf module).
"""

GROUP = "agentbox.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

AGENTBOX_KIND = "AgentBox"
AGENTBOX_PLURAL = "agentboxes"
SUBSCRIPTION_KIND = "Subscription"
SUBSCRIPTION_PLURAL = "subscriptions"

# `kubectl get agentbox-all` lists both kinds. Not "agentbox": a category equal to a resource's singular
# makes `kubectl get/delete agentbox x` reach Subscriptions too.
CATEGORY = "agentbox-all"

FINALIZER = f"{GROUP}/finalizer"

# Labels put on every child object (pod, box credentials Secret).
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_BOX = f"{GROUP}/box"
MANAGER_NAME = "agentbox-controller"

# Annotations a human sets on an AgentBox to steer the scheduled resume.
ANNOTATION_RESUME_NOW = f"{GROUP}/resume-now"      # any value: resume every limited tab now
ANNOTATION_RESUME_AT = f"{GROUP}/resume-at"        # RFC 3339 instant: resume limited tabs then
ANNOTATION_CANCEL_RESUME = f"{GROUP}/cancel-resume"  # "true": keep tabs as they are

# tmux layout inside the box pod: one session, one tab (tmux window) per agent.
TMUX_SESSION = "agentbox"

# On the box pod: digest of the spec.template it was built from (controller.domain.podheal.template_hash).
ANNOTATION_TEMPLATE_HASH = f"{GROUP}/template-hash"

# Where the box credentials Secret is mounted in every container of the box pod.
CREDENTIALS_MOUNT_PATH = "/var/run/agentbox/credentials"
CREDENTIALS_VOLUME = "agentbox-credentials"

# Condition types. Polarity: Ready True = good; the others True = something to look at.
COND_POD_OUT_OF_DATE = "PodOutOfDate"    # True: the pod was built from an older spec.template (see spec.podUpdate)
COND_READY = "Ready"                    # True: pod and credentials in place, tabs watched
COND_RATE_LIMITED = "RateLimited"       # True: at least one tab waits for a usage reset
COND_NEEDS_ATTENTION = "NeedsAttention"  # True: a tab needs a human (see message)
COND_RESERVED = "Reserved"              # True: the subscription's reserve stopped the box
COND_TERMINAL_STREAM = "TerminalStream"  # True: the live tmux stream is attached; False: polling (reason says why)
R_STREAMING = "Streaming"                  # TerminalStream True: changes come over the live tmux stream
R_NO_CONTROL_MODE = "NoControlMode"        # TerminalStream False: no tmux in the box container, or older than 3.2
R_STREAM_RECONNECTING = "StreamReconnecting"  # TerminalStream False: the stream dropped; reconnecting with backoff
R_STREAM_DISABLED = "StreamDisabled"       # TerminalStream False: settings.tmuxStream is off
COND_INPUT_IGNORED = "InputIgnored"     # True: a pattern, an annotation or a box file is invalid and ignored
COND_CREDENTIALS_VALID = "CredentialsValid"  # Subscription: Secret and login file valid
COND_USAGE_FETCHED = "UsageFetched"     # Subscription: last usage read succeeded

# Condition reasons (CamelCase, Kubernetes style).
R_RECONCILED = "Reconciled"
R_INVALID_SPEC = "InvalidSpec"
R_SUBSCRIPTION_NOT_FOUND = "SubscriptionNotFound"
R_SECRET_NOT_FOUND = "SecretNotFound"
R_SECRET_KEY_MISSING = "SecretKeyMissing"
R_INVALID_LOGIN = "InvalidLoginFile"
R_PROVIDER_MISMATCH = "ProviderMismatch"
R_SUBSCRIPTION_CHANGED = "SubscriptionChanged"  # Event (Normal): spec.subscription changed, rotation off: the box moved
R_UNSUPPORTED_AGENT = "UnsupportedAgent"
R_POD_PENDING = "PodPending"              # Ready False: no pod yet, or its phase is not Running
R_CONTAINER_WAITING = "ContainerWaiting"  # Ready False: the box container waits (message: CrashLoopBackOff, ...)
R_CONTAINER_TERMINATED = "ContainerTerminated"  # Ready False: the box container ended for good
R_CHECKING_SESSION = "CheckingSession"    # Ready False: container running, tmux session not checked yet
R_POD_MISSING = "PodMissing"              # Ready False: the box pod is gone; it is being recreated
R_POD_FAILED = "PodFailed"                # Ready False: the box pod ended (evicted, failed); it is being replaced
R_POD_TERMINATING = "PodTerminating"      # Ready False: the box pod is being deleted; a new one follows
R_TEMPLATE_CHANGED = "TemplateChanged"    # PodOutOfDate True: the pod predates the current spec.template
R_UP_TO_DATE = "UpToDate"                 # PodOutOfDate False
R_SESSION_MISSING = "SessionMissing"      # Ready False: container running, no tmux session `agentbox`
R_POLICY_VIOLATION = "PolicyViolation"  # Ready False: spec.template breaks the box policy; no pod is created
R_WAITING_FOR_RESET = "WaitingForReset"
R_NONE_LIMITED = "NoTabLimited"
R_RECENT_INPUT = "RecentHumanInput"
R_AWAITING_INPUT = "AwaitingInput"
R_PROMPT_NOT_EMPTY = "PromptNotEmpty"
R_RESUME_FAILED = "ResumeNotTakingEffect"
R_ALL_CLEAR = "AllClear"
R_USAGE_READ = "UsageRead"
R_UPSTREAM_UNAVAILABLE = "UpstreamUnavailable"
R_UNAUTHORIZED = "Unauthorized"
R_STREAM_UNUSABLE = "StreamUnusable"  # TerminalStream False: the box's tmux stream broke the protocol or its bounds again and again; polling
R_BOX_OUTPUT_TOO_LARGE = "BoxOutputTooLarge"  # NeedsAttention True: a capture printed more than exec_max_output_bytes
R_TMUX_MISSING = "TmuxMissing"            # NeedsAttention True: the tabs could not be read: no tmux session `agentbox`
R_INVALID_PATTERN = "InvalidPattern"        # InputIgnored True: a spec.detection.patterns[] regex does not compile
R_INVALID_ANNOTATION = "InvalidAnnotation"  # InputIgnored True: agentbox.dev/resume-at is not an instant within 31 days
R_INVALID_BOX_FILE = "InvalidBoxFile"       # InputIgnored True: a usage file in the box is oversized or unreadable
"""Agents that run on a subscription, mapped to their provider."""
