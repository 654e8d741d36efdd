"""The datasets `python -m data_prep DATASET` converts, by name."""

from data_prep import aime, apps, codecontests, gsm8k, livecodebench, multihop_qa, olympiadbench, open_qa, polaris

SOURCES = {
    source.name: source
    for source in (
        codecontests.SOURCE,
        apps.SOURCE,
        livecodebench.SOURCE,
        aime.AIME24,
        aime.AIME25,
        olympiadbench.SOURCE,
        polaris.SOURCE,
        gsm8k.SOURCE,
        open_qa.NQ,
        open_qa.TRIVIAQA,
        open_qa.POPQA,
        multihop_qa.HOTPOTQA,
        multihop_qa.WIKI2,
        multihop_qa.MUSIQUE,
        open_qa.BAMBOOGLE,
    )
}
