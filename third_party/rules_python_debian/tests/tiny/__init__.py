"""A one-module distribution that the wheelmaker test packages."""


def main() -> None:
    print("tiny says hello")
