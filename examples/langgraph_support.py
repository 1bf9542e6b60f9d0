"""A customer support email agent in LangGraph, run as a Resumer stage.

The agent is LangGraph's own: the walkthrough "Thinking in LangGraph" of the LangGraph
documentation (https://docs.langchain.com/oss/python/langgraph/thinking-in-langgraph, from
github.com/langchain-ai/docs, src/oss/langgraph/thinking-in-langgraph.mdx), its Python code
copied as published: read the email, classify it (a model, structured output), search the
docs or file a bug, draft a reply (a model), have a person review it (interrupt()), send it.
Copyright (c) LangChain, Inc.; LangGraph and its examples are published under the MIT
License (github.com/langchain-ai/langgraph/blob/main/LICENSE), kept with this credit.

What changed for Resumer (lines marked "# Resumer"; the closing section is new):

    the chat model ...... ChatResumer, where the docs had ChatOpenAI: each turn a recorded
                          call of the pipeline's model tool, never billed twice
    two side effects .... the docs' "Would be created via API" and "Integrate with email
                          service", made real as durable tools (IDEMPOTENT, keyed) against a
                          mail API with its own state: the bug tracker takes bugs by mail
    interrupt() ......... the human_review node's, answered on a Resumer gate (the form
                          below), which resumes the graph with Command(resume=answer)
    an import ........... HumanMessage from langchain_core (the `langchain` package is not
                          needed for it)

The docs' code is kept as published, its layout and its lint findings too (hence the
ruff and fmt comments below), so that its diff against the original counts only what
Resumer needs. Run it against the demo service's scripted model and mail (docs/demo.md):

    python -m demo_service --port 8001 &
    export PYTHONPATH=examples RESUMER_PIPELINES=langgraph_support.pipeline RESUMER_FAULTS=1
    export SUPPORT_API_URL=http://127.0.0.1:8001 MODEL_BASE_URL=http://127.0.0.1:8001/v1
    python manage.py start_run langgraph-support --input model=script:my-script \\
        --input email_content="The export crashes when I pick PDF."
    python manage.py work

tests/test_langgraph_support.py runs it on real workers, killed mid-graph and resumed.
"""

# ruff: noqa: E402, F811, F821, F841, I001
# fmt: off
from typing import TypedDict, Literal

# Define the structure for email classification
class EmailClassification(TypedDict):
    intent: Literal["question", "bug", "billing", "feature", "complex"]
    urgency: Literal["low", "medium", "high", "critical"]
    topic: str
    summary: str

class EmailAgentState(TypedDict):
    # Raw email data
    email_content: str
    sender_email: str
    email_id: str

    # Classification result
    classification: EmailClassification | None

    # Raw search/API results
    search_results: list[str] | None  # List of raw document chunks
    customer_history: dict | None  # Raw customer data from CRM

    # Generated content
    draft_response: str | None
    messages: list[str] | None

from typing import Literal
from langgraph.graph import StateGraph, START, END
from langgraph.types import interrupt, Command, RetryPolicy
from runs.integrations.langgraph import ChatResumer  # Resumer
from langchain_core.messages import HumanMessage  # Resumer

llm = ChatResumer(model="gpt-5-nano")  # Resumer

def read_email(state: EmailAgentState) -> dict:
    """Extract and parse email content"""
    # In production, this would connect to your email service
    return {
        "messages": [HumanMessage(content=f"Processing email: {state['email_content']}")]
    }

def classify_intent(state: EmailAgentState) -> Command[Literal["search_documentation", "human_review", "draft_response", "bug_tracking"]]:
    """Use LLM to classify email intent and urgency, then route accordingly"""

    # Create structured LLM that returns EmailClassification dict
    structured_llm = llm.with_structured_output(EmailClassification)

    # Format the prompt on-demand, not stored in state
    classification_prompt = f"""
    Analyze this customer email and classify it:

    Email: {state['email_content']}
    From: {state['sender_email']}

    Provide classification including intent, urgency, topic, and summary.
    """

    # Get structured response directly as dict
    classification = structured_llm.invoke(classification_prompt)

    # Determine next node based on classification
    if classification['intent'] == 'billing' or classification['urgency'] == 'critical':
        goto = "human_review"
    elif classification['intent'] in ['question', 'feature']:
        goto = "search_documentation"
    elif classification['intent'] == 'bug':
        goto = "bug_tracking"
    else:
        goto = "draft_response"

    # Store classification as a single dict in state
    return Command(
        update={"classification": classification},
        goto=goto
    )

def search_documentation(state: EmailAgentState) -> Command[Literal["draft_response"]]:
    """Search knowledge base for relevant information"""

    # Build search query from classification
    classification = state.get('classification', {})
    query = f"{classification.get('intent', '')} {classification.get('topic', '')}"

    try:
        # Implement your search logic here
        # Store raw search results, not formatted text
        search_results = [
            "Reset password via Settings > Security > Change Password",
            "Password must be at least 12 characters",
            "Include uppercase, lowercase, numbers, and symbols"
        ]
    except SearchAPIError as e:
        # For recoverable search errors, store error and continue
        search_results = [f"Search temporarily unavailable: {str(e)}"]

    return Command(
        update={"search_results": search_results},  # Store raw results or error
        goto="draft_response"
    )

def bug_tracking(state: EmailAgentState) -> Command[Literal["draft_response"]]:
    """Create or update bug tracking ticket"""

    # Create ticket in your bug tracking system
    ticket_id = file_bug.invoke({"summary": state["classification"]["summary"], "reporter": state["sender_email"]})["id"]  # Resumer

    return Command(
        update={
            "search_results": [f"Bug ticket {ticket_id} created"],
            "current_step": "bug_tracked"
        },
        goto="draft_response"
    )

def draft_response(state: EmailAgentState) -> Command[Literal["human_review", "send_reply"]]:
    """Generate response using context and route based on quality"""

    classification = state.get('classification', {})

    # Format context from raw state data on-demand
    context_sections = []

    if state.get('search_results'):
        # Format search results for the prompt
        formatted_docs = "\n".join([f"- {doc}" for doc in state['search_results']])
        context_sections.append(f"Relevant documentation:\n{formatted_docs}")

    if state.get('customer_history'):
        # Format customer data for the prompt
        context_sections.append(f"Customer tier: {state['customer_history'].get('tier', 'standard')}")

    # Build the prompt with formatted context
    draft_prompt = f"""
    Draft a response to this customer email:
    {state['email_content']}

    Email intent: {classification.get('intent', 'unknown')}
    Urgency level: {classification.get('urgency', 'medium')}

    {chr(10).join(context_sections)}

    Guidelines:
    - Be professional and helpful
    - Address their specific concern
    - Use the provided documentation when relevant
    """

    response = llm.invoke(draft_prompt)

    # Determine if human review needed based on urgency and intent
    needs_review = (
        classification.get('urgency') in ['high', 'critical'] or
        classification.get('intent') == 'complex'
    )

    # Route to appropriate next node
    goto = "human_review" if needs_review else "send_reply"

    return Command(
        update={"draft_response": response.content},  # Store only the raw response
        goto=goto
    )

def human_review(state: EmailAgentState) -> Command[Literal["send_reply", END]]:
    """Pause for human review using interrupt and route based on decision"""

    classification = state.get('classification', {})

    # interrupt() must come first - any code before it will re-run on resume
    human_decision = interrupt({
        "email_id": state.get('email_id',''),
        "original_email": state.get('email_content',''),
        "draft_response": state.get('draft_response',''),
        "urgency": classification.get('urgency'),
        "intent": classification.get('intent'),
        "action": "Please review and approve/edit this response"
    })

    # Now process the human's decision
    if human_decision.get("approved"):
        return Command(
            update={"draft_response": human_decision.get("edited_response", state.get('draft_response',''))},
            goto="send_reply"
        )
    else:
        # Rejection means human will handle directly
        return Command(update={}, goto=END)

def send_reply(state: EmailAgentState) -> dict:
    """Send the email response"""
    # Integrate with email service
    send_email.invoke({"to": state["sender_email"], "subject": "Re: your email", "body": state["draft_response"]})  # Resumer
    return {}

from langgraph.checkpoint.memory import MemorySaver
from langgraph.types import RetryPolicy

# Create the graph
workflow = StateGraph(EmailAgentState)

# Add nodes with appropriate error handling
workflow.add_node("read_email", read_email)
workflow.add_node("classify_intent", classify_intent)

# Add retry policy for nodes that might have transient failures
workflow.add_node(
    "search_documentation",
    search_documentation,
    retry_policy=RetryPolicy(max_attempts=3)
)
workflow.add_node("bug_tracking", bug_tracking)
workflow.add_node("draft_response", draft_response)
workflow.add_node("human_review", human_review)
workflow.add_node("send_reply", send_reply)

# Add only the essential edges
workflow.add_edge(START, "read_email")
workflow.add_edge("read_email", "classify_intent")
workflow.add_edge("send_reply", END)

# Compile with checkpointer for persistence, in case run graph with Local_Server --> Please compile without checkpointer
memory = MemorySaver()
app = workflow.compile(checkpointer=memory)


# fmt: on
# --- Resumer: the side effects, the review form, the graph as a stage ----------------------

import os
from typing import Annotated, Any

import httpx
from django import forms
from langchain_core.tools import InjectedToolArg, tool

from runs.integrations.langgraph import GraphAgent, Interrupt, durable
from runs.models import ReplayPolicy
from runs.pipeline import Call, Input, Pipeline, Stage, StageOutput, ToolRejected
from runs.tools.model import model_tool

BUG_TRACKER = "bugs@tracker.example"


def _mail(to: str, subject: str, body: str, key: str) -> dict[str, Any]:
    """The mail API (the demo service's /v1/mail): its address read in the worker, at call
    time; the delivery key sent as the Idempotency-Key, so a retry delivers once."""
    url = os.environ.get("SUPPORT_API_URL", "http://127.0.0.1:8001") + "/v1/mail"
    answer = httpx.post(
        url,
        json={"to": to, "subject": subject, "body": body},
        headers={"Idempotency-Key": key} if key else {},
        timeout=10,
        trust_env=False,
    )
    if answer.is_client_error:  # refused: nothing was sent
        raise ToolRejected(f"POST /v1/mail answered {answer.status_code}: {answer.text[:200]}")
    answer.raise_for_status()  # anything else: the outcome is unknown
    return answer.json()


@durable(ReplayPolicy.IDEMPOTENT, external_id=lambda output: output["id"])
@tool
def file_bug(
    summary: str, reporter: str, delivery_key: Annotated[str, InjectedToolArg] = ""
) -> dict:
    """File a bug in the tracker, which takes bugs by mail."""
    return {"id": _mail(BUG_TRACKER, f"Bug reported by {reporter}", summary, delivery_key)["id"]}


@durable(ReplayPolicy.IDEMPOTENT, external_id=lambda output: output["id"])
@tool
def send_email(
    to: str, subject: str, body: str, delivery_key: Annotated[str, InjectedToolArg] = ""
) -> dict:
    """Send an email."""
    return {"id": _mail(to, subject, body, delivery_key)["id"]}


class Review(forms.Form):
    """What human_review's interrupt() gets back: the docs' {"approved", "edited_response"}."""

    approved = forms.BooleanField(required=False, help_text="Unticked: a person handles it.")
    edited_response = forms.CharField(widget=forms.Textarea, max_length=4000)


agent = GraphAgent(
    app,
    tools=[file_bug, send_email],
    interrupts={
        "human_review": Interrupt(
            form=Review,
            question=lambda value: value["action"],
            initial=lambda value: {"edited_response": value["draft_response"] or ""},
        )
    },
)


def support(ctx) -> StageOutput:
    state = agent.invoke(
        ctx,
        {
            "email_content": ctx.inputs["email_content"],
            "sender_email": ctx.inputs["sender_email"],
            "email_id": ctx.inputs["email_id"],
            "messages": [],
        },
        model=ctx.inputs["model"],
    )
    kept = ("classification", "search_results", "draft_response")
    return StageOutput(outputs={name: state.get(name) for name in kept})


def _text(name: str, default: str) -> Input:
    return Input(name, lambda pinned: default, versioned=False, help=f"the email's {name}")


model = model_tool(
    "model", base_url=lambda: os.environ["MODEL_BASE_URL"], api_key_env="MODEL_API_KEY"
)
EMAIL = ("email_content", "sender_email", "email_id")

pipeline = Pipeline(
    name="langgraph-support",
    description="LangGraph's customer support email agent, every model turn and act governed",
    inputs=(
        Input("model", lambda pinned: os.environ.get("MODEL_NAME", "script:langgraph-support")),
        _text("email_content", "The export feature crashes when I select PDF format."),
        _text("sender_email", "customer@example.com"),
        _text("email_id", "email_123"),
    ),
    tools=(model, *agent.tools),
    stages=(
        Stage(
            "support",
            support,
            consumes=("model", *EMAIL),
            tools=("model", *agent.tool_names),
            # What a bug report's path makes, for the plans of a resume: the graph's path is
            # the model's to choose, so another path's calls are departures from the plan.
            calls=(
                Call("turn-1", "model"),
                Call("file_bug-1", "file_bug"),
                Call("turn-2", "model"),
                Call("send_email-1", "send_email"),
            ),
            asks=("human_review.interrupt-1",),
        ),
    ),
)
